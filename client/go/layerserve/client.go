package layerserve

// Client: every served layerserve RPC and the standard health check, each with a
// deadline.
//
// A Client holds one gRPC connection and is safe for concurrent use. Many large
// messages on one connection are slow (one HTTP/2 connection): for throughput, use a
// Client per concurrent caller (one connection carried ~0.5 GB/s of 4 MB messages, one
// per thread ~0.85 GB/s: docs/perf/2026-11-30-grpc-end-to-end.md).
//
// Errors are gRPC status errors: status.Code(err) is the code (codes.InvalidArgument,
// codes.NotFound...), status.Convert(err).Message() the server's message, e.g.
// "input.data: shape [3,5] FLOAT32 needs 60 bytes, got 56".

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/layerserve/layerserve/client/go/gen/layerserve/v1"
)

const (
	// DefaultTimeout bounds a call whose context has no deadline.
	DefaultTimeout = 30 * time.Second
	// DefaultMaxMessageBytes is the server's default --max-message-bytes; grpc-go
	// would otherwise refuse replies over 4 MiB.
	DefaultMaxMessageBytes = 256 << 20
)

// Client calls one layerserve server.
type Client struct {
	conn *grpc.ClientConn
	// Stub is the generated client, for options the wrapper does not take.
	Stub   pb.LayerServiceClient
	health healthpb.HealthClient
	// Timeout applies to calls whose context has no deadline of its own.
	Timeout time.Duration
}

// Dial connects to target ("host:port"). Without options the connection is
// plaintext. For a secured server pass WithToken or WithTokenFile (a bearer token)
// and WithTLSFiles (TLS, with a client certificate for mutual TLS), see security.go;
// grpc's own options go in the same list (later options win). A bad security option
// (an unreadable file, two tokens) is Dial's error. Calls that fail with UNAVAILABLE
// are retried (retry.go): WithRetryPolicy changes how, or turns it off. Session
// calls carry the session's id in the x-layerserve-session header
// (session_header.go).
func Dial(target string, opts ...grpc.DialOption) (*Client, error) {
	if err := checkSecurityOptions(opts); err != nil {
		return nil, err
	}
	retry, err := retryDialOptions(opts)
	if err != nil {
		return nil, err
	}
	defaults := append([]grpc.DialOption{
		grpc.WithTransportCredentials(plaintext{}), // Not WithInsecure: see plaintext.go.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(DefaultMaxMessageBytes),
			grpc.MaxCallSendMsgSize(DefaultMaxMessageBytes)),
		grpc.WithUserAgent("layerserve-go/" + Version),
		grpc.WithChainUnaryInterceptor(sessionHeaderInterceptor), // session_header.go
	}, retry...)
	conn, err := grpc.Dial(target, append(defaults, opts...)...)
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn, Stub: pb.NewLayerServiceClient(conn),
		health: healthpb.NewHealthClient(conn), Timeout: DefaultTimeout}, nil
}

// Close closes the connection; calls in flight fail with CANCELLED.
func (c *Client) Close() error {
	return c.conn.Close()
}

// withDeadline gives ctx the client's Timeout unless it has a deadline already.
func (c *Client) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.Timeout)
}

// Normalize runs LayerNorm or RMSNorm (optionally fused with a residual add).
func (c *Client) Normalize(ctx context.Context, req *pb.NormalizeRequest) (*pb.NormalizeResponse, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	return c.Stub.Normalize(ctx, req)
}

// PositionalEncode runs a sinusoidal, learned, RoPE, ALiBi or T5-bias encoding.
func (c *Client) PositionalEncode(ctx context.Context, req *pb.PositionalEncodeRequest) (*pb.PositionalEncodeResponse, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	return c.Stub.PositionalEncode(ctx, req)
}

// Activate runs an element-wise or gated activation.
func (c *Client) Activate(ctx context.Context, req *pb.ActivateRequest) (*pb.ActivateResponse, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	return c.Stub.Activate(ctx, req)
}

// BlockForward runs consecutive Transformer blocks of a served model.
func (c *Client) BlockForward(ctx context.Context, req *pb.BlockForwardRequest) (*pb.BlockForwardResponse, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	return c.Stub.BlockForward(ctx, req)
}

// StepSessions runs many KV-cache sessions in one BlockForward call (session_ids):
// row b of hidden [B, T, D] ([T, D]: one session) continues sessionIDs[b] exactly as
// that session's own call with that row would, bit for bit, its positions
// continuing from the session's length. sequenceLengths (B entries in [1, T], or
// nil) makes the rows ragged: row b adds its first sequenceLengths[b] tokens, and
// its padded rows of the output are zeros. The response holds every row's output
// and SessionLengths, each session's new length in the order of sessionIDs.
//
// All or nothing: when one session is unknown, busy, full or not of the same model
// and layers as the others, the call fails with the code that session alone would
// get and a message naming the row ("session_ids[2]: ..."), and no session
// advances. Like a session_id call it is sent once, never retried. For
// output_dtype or attention statistics, set SessionIds in a request and call
// BlockForward.
func (c *Client) StepSessions(ctx context.Context, sessionIDs []string, hidden *pb.Tensor,
	sequenceLengths []int64) (*pb.BlockForwardResponse, error) {
	if len(sessionIDs) == 0 {
		return nil, status.Error(codes.InvalidArgument,
			"session_ids: empty; give one session per row of hidden_states")
	}
	resp, err := c.BlockForward(ctx, &pb.BlockForwardRequest{SessionIds: sessionIDs,
		HiddenStates: hidden, SequenceLengths: sequenceLengths})
	if err != nil {
		return nil, err
	}
	if len(resp.GetSessionLengths()) != len(sessionIDs) {
		return nil, status.Errorf(codes.Internal, "response session_lengths: %d entries for %d sessions",
			len(resp.GetSessionLengths()), len(sessionIDs))
	}
	return resp, nil
}

// ListModels returns every model the server has, ready or failed.
func (c *Client) ListModels(ctx context.Context) ([]*pb.ModelInfo, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	resp, err := c.Stub.ListModels(ctx, &pb.ListModelsRequest{})
	if err != nil {
		return nil, err
	}
	return resp.GetModels(), nil
}

// GetModel describes one model ("" = the server's default); NOT_FOUND if unknown.
func (c *Client) GetModel(ctx context.Context, name string) (*pb.ModelInfo, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	return c.Stub.GetModel(ctx, &pb.GetModelRequest{Name: name})
}

// OpenSession opens a KV-cache session for incremental decoding; pass its
// SessionId in BlockForward requests (sent once, never retried: retry.go), or
// several sessions' ids to StepSessions.
func (c *Client) OpenSession(ctx context.Context, req *pb.OpenSessionRequest) (*pb.OpenSessionResponse, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	return c.Stub.OpenSession(ctx, req)
}

// CloseSession frees a session's cache; NOT_FOUND if it is unknown or expired.
func (c *Client) CloseSession(ctx context.Context, sessionID string) error {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	_, err := c.Stub.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: sessionID})
	return err
}

// Health is grpc.health.v1 Check: SERVING while the server accepts work,
// NOT_SERVING while it drains. service "" is the server; "layerserve.v1.LayerService"
// answers the same; any other name is NOT_FOUND.
func (c *Client) Health(ctx context.Context, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	resp, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, err
	}
	return resp.GetStatus(), nil
}
