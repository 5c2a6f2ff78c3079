// Command layerserve-example is the first run after installing the Go client:
//
//	go install github.com/layerserve/layerserve/client/go/cmd/layerserve-example@v0.1.0
//	layerserve-example [--address HOST:PORT] [--steps N] [--timeout 30s]
//	                   [--token-file F] [--tls-ca CA.crt] [--tls-cert C.crt --tls-key C.key]
//
// Against a running layerserve (./scripts/serve listens on 127.0.0.1:50051) it lists
// the models, runs one RMSNorm checked against the formula, then opens a KV-cache
// session over every block of the default model, sends a 4-token prefill and N
// one-token decode steps (pseudo-random hidden states standing in for token
// embeddings), checks the session length after each, closes the session and prints
// one summary line. Any error goes to stderr with a non-zero exit: 2 for a failed
// call (or a flag it does not know), 1 for a wrong answer or a bad option. Session
// calls carry the x-layerserve-session header (Dial's interceptor), so the example
// also runs through a balancer that routes sessions on it.
//
// For a secured server: --token-file for --auth-token-file, --tls-ca for --tls-cert,
// --tls-cert and --tls-key for --tls-client-ca.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/layerserve/layerserve/client/go/gen/layerserve/v1"
	"github.com/layerserve/layerserve/client/go/layerserve"
)

const prefillTokens = 4

// wrongAnswer: the server answered, but not what the example checks for.
type wrongAnswer struct{ error }

func main() {
	address := flag.String("address", "127.0.0.1:50051", "the server, HOST:PORT")
	steps := flag.Int("steps", 20, "decode steps after the prefill")
	timeout := flag.Duration("timeout", 30*time.Second, "deadline of each call")
	tokenFile := flag.String("token-file", "", "file holding the server's bearer token")
	tlsCA := flag.String("tls-ca", "", "PEM CA of the server's certificate: connect with TLS")
	tlsCert := flag.String("tls-cert", "", "PEM client certificate (with --tls-key): mutual TLS")
	tlsKey := flag.String("tls-key", "", "PEM key of --tls-cert")
	flag.Parse()
	if *steps < 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "error: --steps must be >= 0 and there are no arguments")
		os.Exit(1)
	}
	var opts []grpc.DialOption
	if *tokenFile != "" {
		opts = append(opts, layerserve.WithTokenFile(*tokenFile))
	}
	if *tlsCA != "" || *tlsCert != "" || *tlsKey != "" {
		opts = append(opts, layerserve.WithTLSFiles(*tlsCA, *tlsCert, *tlsKey))
	}
	client, err := layerserve.Dial(*address, opts...)
	if err != nil { // A bad option or an unreadable file (the message never holds the token).
		fmt.Fprintf(os.Stderr, "error: %s: %v\n", *address, err)
		os.Exit(1)
	}
	defer client.Close()
	client.Timeout = *timeout
	summary, err := run(context.Background(), client, *steps)
	if err != nil {
		var wrong wrongAnswer
		if errors.As(err, &wrong) {
			fmt.Fprintf(os.Stderr, "error: %s: %v\n", *address, err)
			os.Exit(1)
		}
		s := status.Convert(err) // The call's gRPC status code and the server's message.
		fmt.Fprintf(os.Stderr, "error: %s: %v: %s\n", *address, s.Code(), s.Message())
		os.Exit(2)
	}
	fmt.Println(summary)
}

// run makes the example's calls and returns the summary line.
func run(ctx context.Context, client *layerserve.Client, steps int) (string, error) {
	models, err := client.ListModels(ctx)
	if err != nil {
		return "", err
	}
	for _, m := range models {
		fmt.Printf("model %s: %s, %d layers, hidden %d, %v default=%v\n", m.Name,
			m.Architecture, m.NumLayers, m.HiddenSize, m.State, m.IsDefault)
	}

	// RMSNorm over the last dim of a [2, 8] batch, against the formula.
	const d = 8
	x := make([]float32, 2*d)
	for i := range x {
		x[i] = float32(math.Sin(float64(i + 1)))
	}
	norm, err := client.Normalize(ctx, &pb.NormalizeRequest{Kind: pb.NormKind_RMS_NORM,
		Input: layerserve.MustTensor(x, []int64{2, d}, pb.DataType_FLOAT32), Epsilon: proto.Float32(1e-6)})
	if err != nil {
		return "", err
	}
	y, err := layerserve.Values(norm.Output)
	if err != nil {
		return "", wrongAnswer{err}
	}
	worst := 0.0 // math.Max keeps a NaN, and !(worst < 1e-5) below fails on it.
	for r := 0; r < 2; r++ {
		sum := 0.0
		for _, v := range x[r*d : (r+1)*d] {
			sum += float64(v) * float64(v)
		}
		rms := math.Sqrt(sum/d + 1e-6)
		for i := r * d; i < (r+1)*d; i++ {
			worst = math.Max(worst, math.Abs(float64(y[i])-float64(x[i])/rms))
		}
	}
	fmt.Printf("normalize: RMSNorm of [2, %d], max |server - formula| = %.2e\n", d, worst)
	if !(worst < 1e-5) {
		return "", wrongAnswer{fmt.Errorf("RMSNorm differs from the formula by %v", worst)}
	}

	// A session over every block of the default model: a prefill, then one token a step.
	model, err := client.GetModel(ctx, "")
	if err != nil {
		return "", err
	}
	opened, err := client.OpenSession(ctx, &pb.OpenSessionRequest{Model: model.Name,
		NumLayers: model.NumLayers})
	if err != nil {
		return "", err
	}
	rng := rand.New(rand.NewSource(0))
	var stepTimes []time.Duration
	length := int64(0)
	for step := 0; step <= steps; step++ { // The prefill, then the decode steps.
		tokens := int64(1)
		if step == 0 {
			tokens = prefillTokens
		}
		hidden := make([]float32, tokens*model.HiddenSize)
		for i := range hidden {
			hidden[i] = float32(rng.NormFloat64())
		}
		start := time.Now()
		out, err := client.BlockForward(ctx, &pb.BlockForwardRequest{Model: model.Name,
			NumLayers: model.NumLayers, SessionId: opened.SessionId,
			HiddenStates: layerserve.MustTensor(hidden, []int64{tokens, model.HiddenSize}, pb.DataType_FLOAT32)})
		if err != nil {
			client.CloseSession(ctx, opened.SessionId) // Best effort: the call's error is the news.
			return "", err
		}
		if step > 0 {
			stepTimes = append(stepTimes, time.Since(start))
		}
		length += tokens
		if err := checkStep(out, length, tokens, model.HiddenSize); err != nil {
			client.CloseSession(ctx, opened.SessionId)
			return "", wrongAnswer{fmt.Errorf("step %d: %v", step, err)}
		}
	}
	if err := client.CloseSession(ctx, opened.SessionId); err != nil {
		return "", err
	}
	median := ""
	if len(stepTimes) > 0 {
		sort.Slice(stepTimes, func(i, j int) bool { return stepTimes[i] < stepTimes[j] })
		median = fmt.Sprintf(", median step %.1f ms", float64(stepTimes[len(stepTimes)/2])/1e6)
	}
	return fmt.Sprintf("ok: %d model(s), normalize checked, session on %s layers 0-%d: prefill %d "+
		"tokens + %d decode steps, length %d, closed%s (layerserve-go %s)", len(models), model.Name,
		model.NumLayers-1, prefillTokens, steps, length, median, layerserve.Version), nil
}

// checkStep: the reply of a session call that sent `tokens` tokens has the session's
// new length, their hidden states and only finite values.
func checkStep(out *pb.BlockForwardResponse, wantLength, tokens, hiddenSize int64) error {
	if out.SessionLength != wantLength {
		return fmt.Errorf("session length %d, expected %d", out.SessionLength, wantLength)
	}
	values, err := layerserve.Values(out.HiddenStates)
	if err != nil {
		return err
	}
	if int64(len(values)) != tokens*hiddenSize {
		return fmt.Errorf("%d hidden values (shape %v), expected %d x %d", len(values),
			out.HiddenStates.GetShape(), tokens, hiddenSize)
	}
	for _, v := range values {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return errors.New("non-finite hidden states")
		}
	}
	return nil
}
