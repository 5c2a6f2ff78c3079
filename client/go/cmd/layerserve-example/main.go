// Command layerserve-example calls a running layerserve from Go: health, the served
// models, RMSNorm of a small batch checked against the formula, and a one-block
// forward pass of the default model sent as bfloat16.
//
//	layerserve-example [-target 127.0.0.1:50051] [-timeout 10s] [-token-file F]
//	                   [-tls-ca CA.crt] [-tls-cert C.crt -tls-key C.key]
//
// For a secured server: -token-file for --auth-token-file, -tls-ca for --tls-cert,
// -tls-cert and -tls-key for --tls-client-ca.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/layerserve/layerserve/client/go/gen/layerserve/v1"
	"github.com/layerserve/layerserve/client/go/layerserve"
)

func main() {
	target := flag.String("target", "127.0.0.1:50051", "layerserve address host:port")
	timeout := flag.Duration("timeout", 10*time.Second, "deadline of each call")
	tokenFile := flag.String("token-file", "", "file holding the server's bearer token")
	tlsCA := flag.String("tls-ca", "", "PEM CA of the server's certificate: connect with TLS")
	tlsCert := flag.String("tls-cert", "", "PEM client certificate (with -tls-key): mutual TLS")
	tlsKey := flag.String("tls-key", "", "PEM key of -tls-cert")
	flag.Parse()
	var opts []grpc.DialOption
	if *tokenFile != "" {
		opts = append(opts, layerserve.WithTokenFile(*tokenFile))
	}
	if *tlsCA != "" || *tlsCert != "" || *tlsKey != "" {
		opts = append(opts, layerserve.WithTLSFiles(*tlsCA, *tlsCert, *tlsKey))
	}
	os.Exit(run(*target, *timeout, opts))
}

func run(target string, timeout time.Duration, opts []grpc.DialOption) int {
	client, err := layerserve.Dial(target, opts...)
	if err != nil { // A bad option or an unreadable file (the message never holds the token).
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	defer client.Close()
	client.Timeout = timeout
	ctx := context.Background()
	// A failed call: its gRPC status code and the server's message.
	fail := func(err error) int {
		s := status.Convert(err)
		fmt.Fprintf(os.Stderr, "error: %v: %s\n", s.Code(), s.Message())
		return 2
	}

	health, err := client.Health(ctx, "")
	if err != nil {
		return fail(err)
	}
	fmt.Println("health:", health)
	models, err := client.ListModels(ctx)
	if err != nil {
		return fail(err)
	}
	for _, m := range models {
		fmt.Printf("model %s: %s, %d layers, hidden %d, %v default=%v\n", m.Name,
			m.Architecture, m.NumLayers, m.HiddenSize, m.State, m.IsDefault)
	}

	// RMSNorm over the last dim of a [2, 8] batch.
	const d = 8
	x := make([]float32, 2*d)
	for i := range x {
		x[i] = float32(math.Sin(float64(i + 1)))
	}
	resp, err := client.Normalize(ctx, &pb.NormalizeRequest{Kind: pb.NormKind_RMS_NORM,
		Input: layerserve.MustTensor(x, []int64{2, d}, pb.DataType_FLOAT32), Epsilon: proto.Float32(1e-6)})
	if err != nil {
		return fail(err)
	}
	y, err := layerserve.Values(resp.Output)
	if err != nil {
		return fail(err)
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
	fmt.Printf("RMSNorm of [2, %d]: max |server - formula| = %.2e\n", d, worst)

	// One block of the default model on 3 tokens, sent and returned as bfloat16.
	model, err := client.GetModel(ctx, "")
	if err != nil {
		return fail(err)
	}
	hidden := make([]float32, 3*model.HiddenSize)
	for i := range hidden {
		hidden[i] = float32(math.Cos(float64(i)) / 4)
	}
	block, err := client.BlockForward(ctx, &pb.BlockForwardRequest{HiddenStates: layerserve.MustTensor(
		hidden, []int64{3, model.HiddenSize}, pb.DataType_BFLOAT16)})
	if err != nil {
		return fail(err)
	}
	fmt.Printf("BlockForward on %s: shape %v %v\n", model.Name, block.HiddenStates.Shape,
		block.HiddenStates.Dtype)
	if !(worst < 1e-5) {
		return 1
	}
	return 0
}
