package layerserve

// Client against the real layerserve started by TestMain (server_test.go): every
// served RPC, its numbers checked against reference_test.go (or the PyTorch golden
// file for BlockForward), and the error codes and messages.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/layerserve/layerserve/client/go/gen/layerserve/v1"
)

const (
	f32  = pb.DataType_FLOAT32
	bf16 = pb.DataType_BFLOAT16
	f16  = pb.DataType_FLOAT16
)

func dial(t *testing.T) *Client {
	t.Helper()
	c, err := Dial(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// values decodes a response tensor, failing the test on a bad one.
func values(t *testing.T, tensor *pb.Tensor) []float32 {
	t.Helper()
	v, err := Values(tensor)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// assertClose checks |got - want| <= tol * max(1, |want|) everywhere (the golden
// files' rule) and reports the worst element; see closeMismatch.
func assertClose(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	if msg := closeMismatch(widen(got), want, tol); msg != "" {
		t.Errorf("%s: %s", what, msg)
	}
}

// closeMismatch is assertClose's rule: "" if every element is within tol * max(1,
// |want|), else how many differ and the worst. A non-finite value on either side
// matches only the same infinity: NaN never matches (no test expects one), and got NaN
// or Inf against a finite want, or a finite got against an infinite want, is a
// mismatch wherever it stands. REQUIRES: len(got) == len(want).
func closeMismatch(got, want []float64, tol float64) string {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	worst, at, bad := math.Inf(-1), -1, 0 // worst is never NaN.
	for i := range got {
		var excess float64
		switch {
		case finite(got[i]) && finite(want[i]):
			excess = math.Abs(got[i]-want[i]) - tol*math.Max(1, math.Abs(want[i]))
		case got[i] == want[i]: // The same infinity.
			excess = math.Inf(-1)
		default:
			excess = math.Inf(1)
		}
		if excess > 0 {
			bad++
		}
		if at < 0 || excess > worst {
			worst, at = excess, i
		}
	}
	if bad == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d elements differ, worst element %d got %g, want %g (tol %g)",
		bad, len(got), at, got[at], want[at], tol)
}

func TestCloseMismatchFailsOnNaNAndInf(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	for _, c := range [][2][]float64{{{0, 1, 2}, {0, 1, 2}}, {{inf, -inf}, {inf, -inf}}} {
		if msg := closeMismatch(c[0], c[1], 1e-5); msg != "" {
			t.Errorf("%v vs %v: %s", c[0], c[1], msg)
		}
	}
	for _, c := range [][2][]float64{
		{{nan, 1, 2}, {0, 1, 2}}, // A finite element after the NaN must not hide it.
		{{0, 1, nan}, {0, 1, 2}},
		{{nan, 1, 2}, {nan, 1, 2}},
		{{inf, 1, 2}, {0, 1, 2}},
		{{-inf, 1, 2}, {0, 1, 2}},
		{{0, 1, 2}, {inf, 1, 2}}, // |0 - Inf| <= tol * Inf would pass.
		{{inf, 1, 2}, {-inf, 1, 2}},
	} {
		if closeMismatch(c[0], c[1], 1e-5) == "" {
			t.Errorf("%v vs %v passed", c[0], c[1])
		}
	}
}

func widen(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// wantCode checks err's gRPC code and that its message starts with prefix.
func wantCode(t *testing.T, err error, code codes.Code, prefix string) {
	t.Helper()
	if status.Code(err) != code || !strings.HasPrefix(status.Convert(err).Message(), prefix) {
		t.Errorf("got %v, want %v with a message starting %q", err, code, prefix)
	}
}

func TestHealth(t *testing.T) {
	c := dial(t)
	ctx := context.Background()
	for _, service := range []string{"", "layerserve.v1.LayerService"} {
		if s, err := c.Health(ctx, service); err != nil || s != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Health(%q) = %v, %v; want SERVING", service, s, err)
		}
	}
	_, err := c.Health(ctx, "no.such.Service")
	wantCode(t, err, codes.NotFound, `unknown service "no.such.Service"`)
}

func TestNormalizeLayerNorm(t *testing.T) {
	c := dial(t)
	const d = 20
	x, w, b := randn(3*d, 1), randn(d, 2), randn(d, 3)
	resp, err := c.Normalize(context.Background(), &pb.NormalizeRequest{
		Kind: pb.NormKind_LAYER_NORM, Input: MustTensor(x, []int64{3, d}, f32),
		Weight: MustTensor(w, []int64{d}, f32), Bias: MustTensor(b, []int64{d}, f32),
		Epsilon: proto.Float32(1e-2)})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(resp.Output.Shape, []int64{3, d}) || resp.Output.Dtype != f32 {
		t.Fatalf("output %v %v", resp.Output.Shape, resp.Output.Dtype)
	}
	if resp.ResidualOut != nil {
		t.Error("residual_out without a residual")
	}
	assertClose(t, "layer norm", values(t, resp.Output), layerNorm(x, d, w, b, 1e-2), 1e-5)
}

func TestNormalizeRMSNormResidualFloat16Wire(t *testing.T) {
	c := dial(t)
	const d = 16
	x := MustTensor(randn(4*d, 4), []int64{4, d}, f16)
	residual := MustTensor(randn(4*d, 5), []int64{4, d}, f16)
	resp, err := c.Normalize(context.Background(), &pb.NormalizeRequest{
		Kind: pb.NormKind_RMS_NORM, Input: x, Residual: residual})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Output.Dtype != f16 || resp.ResidualOut.Dtype != f16 {
		t.Fatalf("dtypes %v %v, want FLOAT16", resp.Output.Dtype, resp.ResidualOut.Dtype)
	}
	// The reference sees the values the server received (rounded to float16); each
	// answer is rounded to float16 once more (2^-11 relative), tolerance 2^-10.
	xs, rs := values(t, x), values(t, residual)
	sum := make([]float32, len(xs))
	for i := range xs {
		sum[i] = xs[i] + rs[i]
	}
	assertClose(t, "residual_out", values(t, resp.ResidualOut), widen(sum), 0x1p-10)
	scale := make([]float64, d)
	for i := range scale {
		scale[i] = 1
	}
	assertClose(t, "rms norm", values(t, resp.Output), rmsNorm(sum, d, scale, 1e-6), 0x1p-10)
}

func TestActivate(t *testing.T) {
	c := dial(t)
	ctx := context.Background()
	x := randn(2*3*8, 6)
	resp, err := c.Activate(ctx, &pb.ActivateRequest{Activation: pb.Activation_GELU,
		Input: MustTensor(x, []int64{2, 3, 8}, f32)})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float64, len(x))
	for i, v := range x {
		want[i] = gelu(float64(v))
	}
	assertClose(t, "gelu", values(t, resp.Output), want, 1e-5)

	// Gated with separate gate and up tensors: silu(gate) * up.
	gate, up := randn(6*4, 7), randn(6*4, 8)
	resp, err = c.Activate(ctx, &pb.ActivateRequest{Activation: pb.Activation_SWIGLU,
		Gate: MustTensor(gate, []int64{6, 4}, f32), Input: MustTensor(up, []int64{6, 4}, f32)})
	if err != nil {
		t.Fatal(err)
	}
	want = make([]float64, len(up))
	for i := range up {
		want[i] = silu(float64(gate[i])) * float64(up[i])
	}
	assertClose(t, "swiglu", values(t, resp.Output), want, 1e-5)
}

// RELU of positive values is the identity, so the server's 16-bit output is its own
// conversion of our float32 values: it must round exactly as the client packs.
func TestSixteenBitOutputsRoundAsTheClientPacks(t *testing.T) {
	c := dial(t)
	in := []float32{1 + 0x1p-11, 1 + 3*0x1p-11, 0x1p-25, 3 * 0x1p-25, 65519, 65520,
		1 + 0x1p-8, 1 + 3*0x1p-8, 0.1, 3.14159, 1e-3, 12345.678}
	for dtype, pack := range map[pb.DataType]func(float32) uint16{
		f16: Float32ToFloat16, bf16: Float32ToBfloat16} {
		resp, err := c.Activate(context.Background(), &pb.ActivateRequest{
			Activation: pb.Activation_RELU, OutputDtype: dtype,
			Input: MustTensor(in, []int64{int64(len(in))}, f32)})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Output.Dtype != dtype {
			t.Fatalf("dtype %v, want %v", resp.Output.Dtype, dtype)
		}
		for i, v := range in {
			if got := binary.LittleEndian.Uint16(resp.Output.Data[2*i:]); got != pack(v) {
				t.Errorf("%v of %g: server %#04x, client %#04x", dtype, v, got, pack(v))
			}
		}
	}
}

func encode(t *testing.T, c *Client, req *pb.PositionalEncodeRequest) *pb.PositionalEncodeResponse {
	t.Helper()
	resp, err := c.PositionalEncode(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestPositionalSinusoidal(t *testing.T) {
	c := dial(t)
	// The CONCATENATED table at positions 2..6, as bfloat16.
	resp := encode(t, c, &pb.PositionalEncodeRequest{OutputDtype: bf16,
		Method: &pb.PositionalEncodeRequest_Sinusoidal{Sinusoidal: &pb.Sinusoidal{
			NumPositions: 5, Dim: 10, Layout: pb.Sinusoidal_CONCATENATED, PositionOffset: 2}}})
	if !reflect.DeepEqual(resp.Output.Shape, []int64{5, 10}) || resp.Output.Dtype != bf16 {
		t.Fatalf("table %v %v", resp.Output.Shape, resp.Output.Dtype)
	}
	assertClose(t, "table", values(t, resp.Output), sinusoidal([]int{2, 3, 4, 5, 6}, 10, 1e4, true), 0x1p-8)

	// INTERLEAVED, added to [T, D] at explicit positions.
	x := randn(3*6, 9)
	resp = encode(t, c, &pb.PositionalEncodeRequest{
		Method: &pb.PositionalEncodeRequest_Sinusoidal{Sinusoidal: &pb.Sinusoidal{
			Input: MustTensor(x, []int64{3, 6}, f32), Base: proto.Float32(100),
			Positions: []int64{5, 0, 9}}}})
	pe := sinusoidal([]int{5, 0, 9}, 6, 100, false)
	for i := range pe {
		pe[i] += float64(x[i])
	}
	assertClose(t, "added", values(t, resp.Output), pe, 1e-5)
}

func TestPositionalLearned(t *testing.T) {
	c := dial(t)
	const b, tokens, d, maxLen = 2, 3, 4, 8
	x, table := randn(b*tokens*d, 10), randn(maxLen*d, 11)
	positions := []int64{7, 1, 3, 0, 2, 6} // One per batch row and token.
	resp := encode(t, c, &pb.PositionalEncodeRequest{
		Method: &pb.PositionalEncodeRequest_Learned{Learned: &pb.Learned{
			Input: MustTensor(x, []int64{b, tokens, d}, f32),
			Table: MustTensor(table, []int64{maxLen, d}, f32), Positions: positions}}})
	want := make([]float64, len(x))
	for i := range x {
		want[i] = float64(x[i]) + float64(table[int(positions[i/d])*d+i%d])
	}
	assertClose(t, "learned", values(t, resp.Output), want, 1e-6)

	// Past the table: OUT_OF_RANGE.
	_, err := c.PositionalEncode(context.Background(), &pb.PositionalEncodeRequest{
		Method: &pb.PositionalEncodeRequest_Learned{Learned: &pb.Learned{
			Input: MustTensor(x, []int64{b, tokens, d}, f32),
			Table: MustTensor(table, []int64{maxLen, d}, f32), PositionOffset: 6}}})
	if status.Code(err) != codes.OutOfRange {
		t.Errorf("position past the table: %v, want OUT_OF_RANGE", err)
	}
}

func TestPositionalRopeInterleavedBTHD(t *testing.T) {
	c := dial(t)
	const b, tokens, h, dh = 2, 3, 2, 8
	q := randn(b*tokens*h*dh, 12)
	resp := encode(t, c, &pb.PositionalEncodeRequest{
		Method: &pb.PositionalEncodeRequest_Rope{Rope: &pb.Rope{
			Query: MustTensor(q, []int64{b, tokens, h, dh}, f32), Layout: pb.Rope_BTHD,
			Style: pb.Rope_INTERLEAVED, Theta: proto.Float32(1000), RotaryDim: 4,
			Positions: []int64{4, 1, 7}}}})
	if resp.Key != nil {
		t.Error("a key came back without one sent")
	}
	want := ropeInterleaved(q, b, tokens, h, dh, []int{4, 1, 7}, 1000, 4)
	assertClose(t, "rope", values(t, resp.Output), want, 1e-5)
}

func TestPositionalAlibiSymmetric(t *testing.T) {
	c := dial(t)
	for _, heads := range []int{4, 12} {
		resp := encode(t, c, &pb.PositionalEncodeRequest{
			Method: &pb.PositionalEncodeRequest_Alibi{Alibi: &pb.Alibi{
				NumHeads: int64(heads), QueryLength: 2, KeyLength: 5, QueryOffset: 1,
				Symmetric: true}}})
		assertClose(t, "alibi", values(t, resp.Output), alibiSymmetric(heads, 2, 5, 1), 1e-6)
	}
	// The reference's slopes, by hand: 12 heads take 8 heads' slopes, then every other
	// slope of 16 heads.
	got := alibiSlopes(12)
	for i, exponent := range []float64{-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -1.5, -2.5, -3.5} {
		if want := math.Pow(2, exponent); !(math.Abs(got[i]-want) <= 1e-15) { // NaN fails.
			t.Errorf("slope %d = %g, want %g", i, got[i], want)
		}
	}
}

func TestPositionalT5BiasDecoder(t *testing.T) {
	c := dial(t)
	const buckets, heads, tq, tk, offset = 8, 2, 4, 9, 5
	table := randn(buckets*heads, 13)
	resp := encode(t, c, &pb.PositionalEncodeRequest{
		Method: &pb.PositionalEncodeRequest_T5Bias{T5Bias: &pb.T5Bias{
			Table: MustTensor(table, []int64{buckets, heads}, f32), MaxDistance: 20,
			QueryLength: tq, KeyLength: tk, QueryOffset: offset}}})
	want := t5Bias(table, heads, tq, tk, offset, false, buckets, 20)
	assertClose(t, "t5 bias", values(t, resp.Output), want, 1e-6)
}

// blockGolden is the part of tests/golden/block_golden.json the tests read.
type blockGolden struct {
	Tolerance map[string]float64
	Models    map[string]struct {
		Info struct {
			Architecture      string
			NumLayers         int32   `json:"num_layers"`
			HiddenSize        int64   `json:"hidden_size"`
			NumAttentionHeads int32   `json:"num_attention_heads"`
			NumKeyValueHeads  int32   `json:"num_key_value_heads"`
			HeadDim           int64   `json:"head_dim"`
			IntermediateSize  int64   `json:"intermediate_size"`
			NormEpsilon       float64 `json:"norm_epsilon"`
		}
	}
	Cases []struct {
		Name            string
		Model           string
		LayerStart      int32 `json:"layer_start"`
		NumLayers       int32 `json:"num_layers"`
		Shape           []int64
		HiddenStates    []float32 `json:"hidden_states"`
		SequenceLengths []int64   `json:"sequence_lengths"`
		PositionOffset  int64     `json:"position_offset"`
		Expected        []float64
	}
}

func loadBlockGolden(t *testing.T) *blockGolden {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(sourceDir, "tests", "golden", "block_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g blockGolden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

func TestListModelsAndGetModel(t *testing.T) {
	c := dial(t)
	ctx := context.Background()
	golden := loadBlockGolden(t)
	models, err := c.ListModels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names, wantNames, defaults []string
	for _, m := range models {
		names = append(names, m.Name)
		if m.State != pb.ModelInfo_READY {
			t.Errorf("%s: %v %s", m.Name, m.State, m.Error)
		}
		// Loaded once, at start: version 1, no failed reload beside it.
		if m.Version != 1 || m.ReloadError != "" {
			t.Errorf("%s: version %d, reload error %q; want 1, none", m.Name, m.Version, m.ReloadError)
		}
		if m.IsDefault {
			defaults = append(defaults, m.Name)
		}
	}
	for name := range golden.Models {
		wantNames = append(wantNames, name)
	}
	sort.Strings(names)
	sort.Strings(wantNames)
	if !reflect.DeepEqual(names, wantNames) || !reflect.DeepEqual(defaults, []string{"tiny-gemma"}) {
		t.Errorf("models %v (default %v), want %v (default tiny-gemma)", names, defaults, wantNames)
	}

	info, err := c.GetModel(ctx, "tiny-qwen3")
	if err != nil {
		t.Fatal(err)
	}
	want := golden.Models["tiny-qwen3"].Info
	got := [...]interface{}{info.Architecture, info.NumLayers, info.HiddenSize,
		info.NumAttentionHeads, info.NumKeyValueHeads, info.HeadDim, info.IntermediateSize}
	if got != [...]interface{}{want.Architecture, want.NumLayers, want.HiddenSize,
		want.NumAttentionHeads, want.NumKeyValueHeads, want.HeadDim, want.IntermediateSize} {
		t.Errorf("tiny-qwen3: %v, want %+v", got, want)
	}
	if !(math.Abs(float64(info.NormEpsilon)-want.NormEpsilon) <= 1e-6*want.NormEpsilon) ||
		info.Norm != pb.NormKind_RMS_NORM || info.Activation != pb.Activation_SWIGLU ||
		info.WeightDtype != f32 || info.Rope.GetScaling().GetType() != pb.RopeScaling_NONE {
		t.Errorf("tiny-qwen3: %v", info)
	}
	if gpt2, err := c.GetModel(ctx, "tiny-gpt2"); err != nil || gpt2.Rope != nil {
		t.Errorf("tiny-gpt2: %v, %v; want no rope (positions are the client's)", gpt2, err)
	}
}

func TestBlockForwardGoldenAndBatchConsistency(t *testing.T) {
	c := dial(t)
	ctx := context.Background()
	golden := loadBlockGolden(t)
	const name = "tiny-qwen3/b2t5_offset7_layers0-1"
	var gc = golden.Cases[0]
	for _, candidate := range golden.Cases {
		if candidate.Name == name {
			gc = candidate
		}
	}
	if gc.Name != name {
		t.Fatalf("no golden case %s", name)
	}
	resp, err := c.BlockForward(ctx, &pb.BlockForwardRequest{
		Model: gc.Model, LayerStart: gc.LayerStart, NumLayers: gc.NumLayers,
		HiddenStates:    MustTensor(gc.HiddenStates, gc.Shape, f32),
		SequenceLengths: gc.SequenceLengths, PositionOffset: gc.PositionOffset,
		WantAttentionStats: true})
	if err != nil {
		t.Fatal(err)
	}
	batched := values(t, resp.HiddenStates)
	assertClose(t, name, batched, gc.Expected, golden.Tolerance["float32_weights"])
	if len(resp.AttentionStats) != 2 || resp.AttentionStats[1].Layer != 1 {
		t.Errorf("attention stats %v, want layers 0 and 1", resp.AttentionStats)
	}

	// Each sequence alone, unpadded, gives its rows of the batch; padded rows are 0.
	tokens, d := gc.Shape[1], gc.Shape[2]
	for b, length := range gc.SequenceLengths {
		row := int64(b) * tokens * d
		single, err := c.BlockForward(ctx, &pb.BlockForwardRequest{
			Model: gc.Model, NumLayers: gc.NumLayers, PositionOffset: gc.PositionOffset,
			HiddenStates: MustTensor(gc.HiddenStates[row:row+length*d], []int64{length, d}, f32)})
		if err != nil {
			t.Fatal(err)
		}
		assertClose(t, "sequence alone", values(t, single.HiddenStates),
			widen(batched[row:row+length*d]), 1e-5)
		for _, v := range batched[row+length*d : row+tokens*d] {
			if v != 0 {
				t.Fatalf("sequence %d: padded rows are not zeros", b)
			}
		}
	}
}

func TestErrorsCarryCodeAndMessage(t *testing.T) {
	c := dial(t)
	ctx := context.Background()
	short := &pb.Tensor{Shape: []int64{3, 5}, Dtype: f32, Data: make([]byte, 56)}
	_, err := c.Normalize(ctx, &pb.NormalizeRequest{Kind: pb.NormKind_LAYER_NORM, Input: short})
	wantCode(t, err, codes.InvalidArgument, "input.data: shape [3,5] FLOAT32 needs 60 bytes, got 56")
	if msg := status.Convert(err).Message(); msg != "input.data: shape [3,5] FLOAT32 needs 60 bytes, got 56" {
		t.Errorf("message %q", msg)
	}

	_, err = c.GetModel(ctx, "no-such-model")
	wantCode(t, err, codes.NotFound, "")
	if !strings.Contains(status.Convert(err).Message(), `no model "no-such-model"`) {
		t.Errorf("message %q", status.Convert(err).Message())
	}

	_, err = c.BlockForward(ctx, &pb.BlockForwardRequest{Model: "tiny-qwen3", LayerStart: 2,
		HiddenStates: MustTensor(make([]float32, 40), []int64{1, 40}, f32)})
	wantCode(t, err, codes.OutOfRange, "layer_start: 2 is past the last layer")

	// A context deadline already passed: DEADLINE_EXCEEDED before anything is sent.
	expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Millisecond))
	defer cancel()
	_, err = c.ListModels(expired)
	wantCode(t, err, codes.DeadlineExceeded, "")

	// The client's own Timeout applies when the context has none.
	c.Timeout = time.Nanosecond
	_, err = c.ListModels(ctx)
	wantCode(t, err, codes.DeadlineExceeded, "")
}
