package layerserve

// plaintext: transport credentials that do nothing, Dial's default. grpc-go 1.33
// (Debian's) refuses grpc.WithInsecure() together with grpc.WithTransportCredentials,
// so a default of WithInsecure could never be replaced by TLS; a credentials value
// can, as the later option wins. (grpc-go 1.34+ has credentials/insecure for this.)

import (
	"context"
	"net"

	"google.golang.org/grpc/credentials"
)

type plaintext struct{}

// plaintextInfo says the connection has no security (for grpc's AuthInfo checks).
type plaintextInfo struct{ credentials.CommonAuthInfo }

func (plaintextInfo) AuthType() string { return "insecure" }

func (plaintext) ClientHandshake(_ context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, plaintextInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (plaintext) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, plaintextInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (plaintext) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
}

func (p plaintext) Clone() credentials.TransportCredentials { return p }

func (plaintext) OverrideServerName(string) error { return nil }
