package layerserve

// Dial's security options: a bearer token (given, or read from a file) and TLS from
// PEM files (CA, client certificate and key).
//
// They are grpc.DialOptions, so they mix with grpc's own in Dial's list, but only
// Dial understands them: it returns their errors (an unreadable file, a certificate
// without its key) and refuses two of a kind (WithToken with WithTokenFile, two
// WithTLSFiles). Errors name the option and the path, never the token.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// layerServiceMethods prefixes the full method names that carry the token: every
// LayerService call, sessions included, and not grpc.health.v1 (open on the server).
const layerServiceMethods = "/layerserve.v1.LayerService/"

// A token is one line of visible ASCII: anything else (a second line, a space) could
// not travel as a header value.
var tokenShape = regexp.MustCompile(`^[\x21-\x7e]+$`)

// securityOption is one of this file's options: what it does to the connection, or
// the error Dial returns instead.
type securityOption struct {
	grpc.DialOption        // grpc.EmptyDialOption{} when err is set.
	setting         string // "token" or "TLS": Dial takes one option of each.
	name            string // The function, for errors.
	err             error
}

// WithToken sends token as "authorization: Bearer <token>" metadata on every
// LayerService call (not on Health). Over a plaintext connection the token travels
// in clear: use it with WithTLSFiles in production.
func WithToken(token string) grpc.DialOption {
	if !tokenShape.MatchString(token) {
		return failed("token", "WithToken",
			errors.New("layerserve: WithToken: the token must be non-empty visible ASCII without spaces or line breaks"))
	}
	return tokenOption("WithToken", token)
}

// WithTokenFile is WithToken with the token read from path, once, now; surrounding
// whitespace (a trailing newline) is dropped. An unreadable or empty file is an error
// of Dial's naming the path.
func WithTokenFile(path string) grpc.DialOption {
	content, err := os.ReadFile(path)
	if err != nil {
		return failed("token", "WithTokenFile",
			fmt.Errorf("layerserve: WithTokenFile %s: cannot read it: %v", path, osReason(err)))
	}
	token := strings.TrimSpace(string(content))
	if token == "" {
		return failed("token", "WithTokenFile", fmt.Errorf("layerserve: WithTokenFile %s: the file is empty", path))
	}
	if !tokenShape.MatchString(token) {
		return failed("token", "WithTokenFile", fmt.Errorf(
			"layerserve: WithTokenFile %s: the file must hold one token on one line (visible ASCII, no spaces)", path))
	}
	return tokenOption("WithTokenFile", token)
}

// WithTLSFiles connects over TLS. caFile is the PEM CA that signed the server's
// certificate ("" = the system's roots). certFile and keyFile, both or neither, are a
// PEM client certificate and its key, for a server started with --tls-client-ca. It
// replaces Dial's default plaintext; a grpc.WithTransportCredentials given after it
// would replace it in turn.
func WithTLSFiles(caFile, certFile, keyFile string) grpc.DialOption {
	fail := func(err error) grpc.DialOption { return failed("TLS", "WithTLSFiles", err) }
	if (certFile == "") != (keyFile == "") {
		given, missing := "certFile", "keyFile"
		if certFile == "" {
			given, missing = missing, given
		}
		return fail(fmt.Errorf("layerserve: WithTLSFiles: the client certificate and key go together: %s given without %s",
			given, missing))
	}
	config := &tls.Config{}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return fail(fmt.Errorf("layerserve: WithTLSFiles: CA file %s: cannot read it: %v", caFile, osReason(err)))
		}
		config.RootCAs = x509.NewCertPool()
		if !config.RootCAs.AppendCertsFromPEM(pem) {
			return fail(fmt.Errorf("layerserve: WithTLSFiles: CA file %s holds no PEM certificate", caFile))
		}
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return fail(fmt.Errorf("layerserve: WithTLSFiles: client certificate %s and key %s: %v",
				certFile, keyFile, osReason(err)))
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return securityOption{DialOption: grpc.WithTransportCredentials(credentials.NewTLS(config)),
		setting: "TLS", name: "WithTLSFiles"}
}

func failed(setting, name string, err error) grpc.DialOption {
	return securityOption{DialOption: grpc.EmptyDialOption{}, setting: setting, name: name, err: err}
}

// tokenOption adds the token with an interceptor rather than PerRPCCredentials:
// those would ride on the health check too, and need RequireTransportSecurity false
// to work on a plaintext connection, which the server accepts.
func tokenOption(name, token string) grpc.DialOption {
	value := "Bearer " + token
	add := func(ctx context.Context, method string, req, reply interface{}, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasPrefix(method, layerServiceMethods) {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", value)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	// Unary only: LayerService has no streaming method.
	return securityOption{DialOption: grpc.WithChainUnaryInterceptor(add), setting: "token", name: name}
}

// osReason is a file error without the path it repeats (the caller names the path).
func osReason(err error) error {
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		return pathErr.Err
	}
	return err
}

// checkSecurityOptions is Dial's check of this file's options among opts: the first
// error, or two options for the same setting.
func checkSecurityOptions(opts []grpc.DialOption) error {
	seen := map[string]string{} // setting -> the option that set it
	for _, o := range opts {
		s, ok := o.(securityOption)
		if !ok {
			continue
		}
		if s.err != nil {
			return s.err
		}
		if first, twice := seen[s.setting]; twice {
			return fmt.Errorf("layerserve: Dial: %s and %s both set the %s: give one", first, s.name, s.setting)
		}
		seen[s.setting] = s.name
	}
	return nil
}
