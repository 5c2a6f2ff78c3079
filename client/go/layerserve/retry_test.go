package layerserve

// Retries of UNAVAILABLE (retry.go): against a port where nothing listens until a
// proxy to the real server (TestMain's) comes up there, as when a replica restarts;
// with retries off the same call fails with UNAVAILABLE; session steps, of one
// session or many, are sent once.

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/layerserve/layerserve/client/go/gen/layerserve/v1"
)

// freePort is a loopback port the OS just handed out, with nothing listening on it.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// proxyOn forwards the connections made to addr to upstream, until the test ends.
func proxyOn(t *testing.T, addr, upstream string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Error(err)
		return
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", upstream)
			if err != nil {
				in.Close()
				continue
			}
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
}

func rmsRequest() *pb.NormalizeRequest {
	return &pb.NormalizeRequest{Kind: pb.NormKind_RMS_NORM,
		Input: &pb.Tensor{Shape: []int64{1, 2}, Dtype: f32, Data: make([]byte, 8)}}
}

func TestRetriesUntilAServerListens(t *testing.T) {
	addr := freePort(t)
	c, err := Dial(addr, WithRetryPolicy(RetryPolicy{MaxAttempts: 8,
		InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, Multiplier: 2}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.AfterFunc(100*time.Millisecond, func() { proxyOn(t, addr, target) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Normalize(ctx, rmsRequest()); err != nil {
		t.Fatalf("Normalize after the server came up: %v", err)
	}
}

func TestWithoutRetriesUnavailableFails(t *testing.T) {
	c, err := Dial(freePort(t), WithRetryPolicy(RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.Normalize(ctx, rmsRequest())
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want UNAVAILABLE", err)
	}
}

func TestRetryInterceptorSendsSessionStepsOnce(t *testing.T) {
	policy := RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond,
		MaxBackoff: time.Millisecond, Multiplier: 2}
	var waits []time.Duration
	retry := retryInterceptor(policy, func(d time.Duration) { waits = append(waits, d) })
	calls := 0
	unavailable := func(context.Context, string, interface{}, interface{}, *grpc.ClientConn,
		...grpc.CallOption) error {
		calls++
		return status.Error(codes.Unavailable, "draining")
	}
	for _, tc := range []struct {
		req  interface{}
		want int
	}{
		{&pb.BlockForwardRequest{SessionId: "replica.1"}, 1},
		{&pb.BlockForwardRequest{SessionIds: []string{"replica.1", "replica.2"}}, 1},
		{&pb.BlockForwardRequest{}, 3},
		{rmsRequest(), 3},
	} {
		calls, waits = 0, nil
		err := retry(context.Background(), "/m", tc.req, nil, nil, unavailable)
		if status.Code(err) != codes.Unavailable || calls != tc.want || len(waits) != tc.want-1 {
			t.Errorf("%T: %d calls, %d waits, %v; want %d calls", tc.req, calls, len(waits), err, tc.want)
		}
	}
	calls = 0
	invalid := func(context.Context, string, interface{}, interface{}, *grpc.ClientConn,
		...grpc.CallOption) error {
		calls++
		return status.Error(codes.InvalidArgument, "kind")
	}
	if err := retry(context.Background(), "/m", rmsRequest(), nil, nil, invalid); calls != 1 ||
		status.Code(err) != codes.InvalidArgument {
		t.Errorf("INVALID_ARGUMENT: %d calls, %v; want 1 call", calls, err)
	}
}

func TestInvalidRetryPolicyIsDialsError(t *testing.T) {
	_, err := Dial("127.0.0.1:1", WithRetryPolicy(RetryPolicy{MaxAttempts: 0}))
	if err == nil || !strings.Contains(err.Error(), "MaxAttempts") {
		t.Fatalf("got %v, want an error naming MaxAttempts", err)
	}
}
