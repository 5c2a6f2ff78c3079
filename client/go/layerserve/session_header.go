package layerserve

// The session header: every call that touches a session carries the session's id in
// the x-layerserve-session metadata, so a load balancer routing on it (nginx in
// deploy/nginx, docs/operations/sessions.md) keeps a session's
// calls on the replica that opened it, as the Python and C++ clients do.
//
// An interceptor of the connection rather than code in each wrapper, so calls on
// Client.Stub carry it too.

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/layerserve/layerserve/client/go/gen/layerserve/v1"
)

// SessionHeader is the metadata key of a session call's session id.
const SessionHeader = "x-layerserve-session"

// sessionOf is the session id a request is routed by, or "": a BlockForward's
// session_id, the first of its session_ids (the sessions of one call live on one
// replica), a CloseSession's session_id.
func sessionOf(req interface{}) string {
	switch r := req.(type) {
	case *pb.BlockForwardRequest:
		if r.GetSessionId() != "" {
			return r.GetSessionId()
		}
		if ids := r.GetSessionIds(); len(ids) > 0 {
			return ids[0]
		}
	case *pb.CloseSessionRequest:
		return r.GetSessionId()
	}
	return ""
}

func sessionHeaderInterceptor(ctx context.Context, method string, req, reply interface{},
	cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if id := sessionOf(req); id != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, SessionHeader, id)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}
