package layerserve

// What a session call puts on the wire: a grpc-go server in the test records the
// metadata each call arrives with (layerserve itself does not echo headers). Every
// call that touches a session carries x-layerserve-session with its id (the first
// of session_ids), calls on Client.Stub too, and no other call carries it.

import (
	"context"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/layerserve/layerserve/client/go/gen/layerserve/v1"
)

// recordingServer answers BlockForward, CloseSession and ListModels and keeps each
// call's incoming metadata, in order.
type recordingServer struct {
	pb.UnimplementedLayerServiceServer
	mu    sync.Mutex
	calls []metadata.MD
}

func (s *recordingServer) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, md)
}

func (s *recordingServer) BlockForward(ctx context.Context, req *pb.BlockForwardRequest) (*pb.BlockForwardResponse, error) {
	s.record(ctx)
	// One length per session, as StepSessions checks.
	return &pb.BlockForwardResponse{SessionLengths: make([]int64, len(req.GetSessionIds()))}, nil
}

func (s *recordingServer) CloseSession(ctx context.Context, _ *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
	s.record(ctx)
	return &pb.CloseSessionResponse{}, nil
}

func (s *recordingServer) ListModels(ctx context.Context, _ *pb.ListModelsRequest) (*pb.ListModelsResponse, error) {
	s.record(ctx)
	return &pb.ListModelsResponse{}, nil
}

func TestSessionCallsCarryTheSessionHeader(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recorder := &recordingServer{}
	server := grpc.NewServer()
	pb.RegisterLayerServiceServer(server, recorder)
	go server.Serve(listener)
	defer server.Stop()
	c := dialSecured(t, listener.Addr().String())
	ctx := context.Background()

	steps := []struct {
		what string
		call func() error
		want []string // The x-layerserve-session values the server saw.
	}{
		{"BlockForward with session_id", func() error {
			_, err := c.BlockForward(ctx, &pb.BlockForwardRequest{SessionId: "s-1"})
			return err
		}, []string{"s-1"}},
		{"StepSessions", func() error {
			_, err := c.StepSessions(ctx, []string{"s-2", "s-3"}, nil, nil)
			return err
		}, []string{"s-2"}},
		{"BlockForward with session_ids", func() error {
			_, err := c.BlockForward(ctx, &pb.BlockForwardRequest{SessionIds: []string{"s-4", "s-5"}})
			return err
		}, []string{"s-4"}},
		{"CloseSession", func() error { return c.CloseSession(ctx, "s-6") }, []string{"s-6"}},
		{"Stub.BlockForward with session_id", func() error {
			_, err := c.Stub.BlockForward(ctx, &pb.BlockForwardRequest{SessionId: "s-7"})
			return err
		}, []string{"s-7"}},
		{"Stub.CloseSession", func() error {
			_, err := c.Stub.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: "s-8"})
			return err
		}, []string{"s-8"}},
		{"BlockForward without a session", func() error {
			_, err := c.BlockForward(ctx, &pb.BlockForwardRequest{NumLayers: 1})
			return err
		}, nil},
		{"ListModels", func() error { _, err := c.ListModels(ctx); return err }, nil},
	}
	for i, step := range steps {
		if err := step.call(); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		recorder.mu.Lock()
		md := recorder.calls[i]
		recorder.mu.Unlock()
		if got := md.Get(SessionHeader); !reflect.DeepEqual(got, step.want) {
			t.Errorf("%s: %s = %q, want %q", step.what, SessionHeader, got, step.want)
		}
		// Dial's user-agent names this client and its version.
		if ua := strings.Join(md.Get("user-agent"), " "); !strings.HasPrefix(ua, "layerserve-go/"+Version+" ") {
			t.Errorf("%s: user-agent %q, want layerserve-go/%s first", step.what, ua, Version)
		}
	}
}
