package layerserve

// Retries of UNAVAILABLE calls, as the Python and C++ clients do
// (client/python/layerserve_client/retry.py): capped exponential backoff with full
// jitter, never past the call's deadline, and only UNAVAILABLE (a draining or
// unreachable server): every other code is the answer. A BlockForward with a
// session_id, or with session_ids (many sessions in one call), is sent once: a step
// lost on the way back may have appended to the sessions' KV caches already, and a
// second send would append twice.
//
// A unary interceptor rather than gRPC's service config retryPolicy: grpc-go 1.33
// (Debian bookworm) applies a retryPolicy only when the process sets
// GRPC_GO_RETRY=on, which a library cannot require, and a service config cannot
// tell session steps from other BlockForward calls.

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/layerserve/layerserve/client/go/gen/layerserve/v1"
)

// RetryPolicy says how UNAVAILABLE calls are retried. MaxAttempts 1 turns retries
// off.
type RetryPolicy struct {
	MaxAttempts    int           // Sends in all, the first included.
	InitialBackoff time.Duration // The cap of the first wait.
	MaxBackoff     time.Duration // No wait is longer.
	Multiplier     float64       // Growth of the cap per retry.
}

// DefaultRetryPolicy is Dial's unless WithRetryPolicy says otherwise; the Python and
// C++ clients' defaults.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 4, InitialBackoff: 50 * time.Millisecond,
	MaxBackoff: 2 * time.Second, Multiplier: 2}

// retryOption is WithRetryPolicy's option: Dial reads the policy from it.
type retryOption struct {
	grpc.EmptyDialOption
	policy RetryPolicy
}

// WithRetryPolicy replaces DefaultRetryPolicy for the Client Dial returns;
// WithRetryPolicy(RetryPolicy{MaxAttempts: 1}) disables retries. The last one given
// wins. An invalid policy is Dial's error.
func WithRetryPolicy(policy RetryPolicy) grpc.DialOption {
	return retryOption{policy: policy}
}

func (p RetryPolicy) validate() error {
	if p.MaxAttempts < 1 {
		return fmt.Errorf("layerserve: WithRetryPolicy: MaxAttempts must be >= 1, got %d", p.MaxAttempts)
	}
	if p.MaxAttempts > 1 && (p.InitialBackoff < 0 || p.MaxBackoff < p.InitialBackoff || p.Multiplier < 1) {
		return fmt.Errorf("layerserve: WithRetryPolicy: need 0 <= InitialBackoff <= MaxBackoff and Multiplier >= 1")
	}
	return nil
}

// backoffCap is the longest wait before retry number `retry` (1 = the first).
func (p RetryPolicy) backoffCap(retry int) time.Duration {
	d := float64(p.InitialBackoff) * math.Pow(p.Multiplier, float64(retry-1))
	return time.Duration(math.Min(d, float64(p.MaxBackoff)))
}

// retryDialOptions are the options that make a connection retry as `opts`'s last
// WithRetryPolicy (or DefaultRetryPolicy) says, or its error.
func retryDialOptions(opts []grpc.DialOption) ([]grpc.DialOption, error) {
	policy := DefaultRetryPolicy
	for _, o := range opts {
		if r, ok := o.(retryOption); ok {
			policy = r.policy
		}
	}
	if err := policy.validate(); err != nil {
		return nil, err
	}
	if policy.MaxAttempts == 1 {
		return nil, nil
	}
	// Reconnect at the pace of the retries: with grpc's default first reconnect
	// after 1 s, retries sooner than that would all fail at once.
	connect := grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: 20 * time.Second}
	connect.Backoff.BaseDelay = policy.InitialBackoff
	connect.Backoff.MaxDelay = policy.MaxBackoff
	return []grpc.DialOption{grpc.WithConnectParams(connect),
		grpc.WithChainUnaryInterceptor(retryInterceptor(policy, time.Sleep))}, nil
}

// retryInterceptor sends a call again on UNAVAILABLE under `policy`; `sleep` is
// time.Sleep but for tests.
func retryInterceptor(policy RetryPolicy, sleep func(time.Duration)) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply interface{}, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if step, ok := req.(*pb.BlockForwardRequest); ok && isSessionStep(step) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		for attempt := 1; ; attempt++ {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if status.Code(err) != codes.Unavailable || attempt >= policy.MaxAttempts {
				return err
			}
			// Full jitter: clients that failed together do not come back together.
			wait := time.Duration(rand.Float64() * float64(policy.backoffCap(attempt)))
			if deadline, ok := ctx.Deadline(); ok && time.Now().Add(wait).After(deadline) {
				// The server's answer says more than a DEADLINE_EXCEEDED of ours.
				return err
			}
			sleep(wait)
		}
	}
}

// isSessionStep: the request appends to one session's KV cache or to many.
func isSessionStep(req *pb.BlockForwardRequest) bool {
	return req.GetSessionId() != "" || len(req.GetSessionIds()) > 0
}
