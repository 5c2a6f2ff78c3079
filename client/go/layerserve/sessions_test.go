package layerserve

// Client.StepSessions against the real layerserve started by TestMain (the golden
// tiny-llama): many sessions in one call equal each session's own session_id calls
// bit for bit over a ragged prefill and steps; a failed call names the row and
// advances no session.

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/layerserve/layerserve/client/go/gen/layerserve/v1"
)

const sessionModel = "tiny-llama"

// openSessions opens n sessions of every layer of sessionModel, closed when the
// test ends; returns their ids and the hidden size.
func openSessions(t *testing.T, c *Client, n int, maxLength int64) ([]string, int64) {
	t.Helper()
	ctx := context.Background()
	info, err := c.GetModel(ctx, sessionModel)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < n; i++ {
		opened, err := c.OpenSession(ctx, &pb.OpenSessionRequest{Model: sessionModel,
			NumLayers: info.NumLayers, MaxLength: maxLength})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, opened.SessionId)
	}
	t.Cleanup(func() {
		for _, id := range ids {
			c.CloseSession(context.Background(), id) // Some are closed already.
		}
	})
	return ids, info.HiddenSize
}

func randomValues(rng *rand.Rand, n int64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}

func TestStepSessionsEqualsEachSessionsOwnCalls(t *testing.T) {
	c := dial(t)
	ctx := context.Background()
	alone, d := openSessions(t, c, 3, 0)
	together, _ := openSessions(t, c, 3, 0)
	rng := rand.New(rand.NewSource(7))
	// A ragged prefill, two one-token steps, a ragged two-token step.
	calls := []struct {
		tokens  int64
		lengths []int64
	}{{5, []int64{5, 2, 4}}, {1, []int64{1, 1, 1}}, {1, nil}, {2, []int64{2, 1, 2}}}
	for i, call := range calls {
		x := randomValues(rng, 3*call.tokens*d)
		resp, err := c.StepSessions(ctx, together, MustTensor(x, []int64{3, call.tokens, d}, f32),
			call.lengths)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		got := values(t, resp.HiddenStates)
		var wantLengths []int64
		for b, id := range alone {
			n := call.tokens
			if call.lengths != nil {
				n = call.lengths[b]
			}
			row := int64(b) * call.tokens * d
			one, err := c.BlockForward(ctx, &pb.BlockForwardRequest{SessionId: id,
				HiddenStates: MustTensor(x[row:row+n*d], []int64{n, d}, f32)})
			if err != nil {
				t.Fatal(err)
			}
			want := values(t, one.HiddenStates)
			for j, v := range got[row : row+call.tokens*d] {
				w := float32(0) // The padding.
				if int64(j) < n*d {
					w = want[j]
				}
				if math.Float32bits(v) != math.Float32bits(w) {
					t.Fatalf("call %d row %d element %d: %v, want %v", i, b, j, v, w)
				}
			}
			wantLengths = append(wantLengths, one.SessionLength)
		}
		if !reflect.DeepEqual(resp.SessionLengths, wantLengths) {
			t.Errorf("call %d: session lengths %v, want %v", i, resp.SessionLengths, wantLengths)
		}
	}
}

func TestStepSessionsErrorNamesTheRowAndAdvancesNoSession(t *testing.T) {
	c := dial(t)
	ctx := context.Background()
	ids, d := openSessions(t, c, 2, 0)
	if err := c.CloseSession(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	a, _ := openSessions(t, c, 1, 0)
	one := MustTensor(make([]float32, d), []int64{1, 1, d}, f32)
	if resp, err := c.StepSessions(ctx, a, one, nil); err != nil || resp.SessionLengths[0] != 1 {
		t.Fatalf("got %v, %v; want length 1", resp, err)
	}
	two := MustTensor(make([]float32, 2*d), []int64{2, 1, d}, f32)
	_, err := c.StepSessions(ctx, []string{a[0], ids[1]}, two, nil)
	wantCode(t, err, codes.NotFound, fmt.Sprintf(`session_ids[1]: session "%s" was closed`, ids[1]))
	if resp, err := c.StepSessions(ctx, a, one, nil); err != nil || resp.SessionLengths[0] != 2 {
		t.Fatalf("got %v, %v; want length 2: the failed call advanced nothing", resp, err)
	}
	_, err = c.StepSessions(ctx, nil, one, nil)
	wantCode(t, err, codes.InvalidArgument, "session_ids: empty")
}
