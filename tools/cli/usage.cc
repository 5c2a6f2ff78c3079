// The help text of layerserve-cli.
#include "tools/cli/common.h"

namespace layerserve::client {

const char kCliUsage[] =
    R"(Usage: layerserve-cli [global flags] <command> [flags]

Calls a layerserve server. Global flags (they may also follow the command):
  --target T        the server: HOST:PORT (default 127.0.0.1:50051), a comma list
                    of IP:PORT balanced round robin, or a gRPC URI (dns:///NAME:PORT,
                    ipv4:A:P,B:P, unix:PATH)
  --timeout-ms N    deadline of the call, retries included (default 30000)
  --retries N       retries of a call refused with UNAVAILABLE (server draining or
                    not reachable), with exponential backoff from 50 ms (default 3)
  --tls             connect with TLS, trusting the system's root certificates
  --tls-ca FILE     connect with TLS, trusting the PEM certificates in FILE
  --tls-cert FILE --tls-key FILE
                    present this client certificate and its private key (PEM),
                    for a server with --tls-client-ca (mutual TLS); implies TLS
  --token-file FILE send the bearer token in FILE ("authorization: Bearer ...")
                    on every call but health, for a server with
                    --auth-token-file; without this flag, the environment
                    variable LAYERSERVE_TOKEN holds the token, if set. Without
                    TLS the token travels in clear
  --version         print "layerserve-cli VERSION" and exit

Commands:
  health [--service NAME] [--json]
      Standard gRPC health check (grpc.health.v1.Health/Check) of service NAME
      (default "": the whole server). Prints SERVING, NOT_SERVING or
      SERVICE_UNKNOWN.
  list-models [--json]
      The models the server serves, with their dimensions.
  get-model [--model NAME] [--json]
      One model's description (default: the server's default model).
  normalize --kind layer|rms --input X.npy --out Y.npy [--weight W.npy]
            [--bias B.npy] [--eps E] [--weight-offset]
            [--residual R.npy --residual-out S.npy]
      LayerNorm or RMSNorm over the last dimension of X. With --residual, X + R
      is normalized and the sum is written to S.
  activate --activation NAME --input X.npy [--gate G.npy] --out Y.npy
      NAME: relu, gelu, gelu-tanh, silu, sigmoid, tanh, quick-gelu, or gated
      swiglu, geglu, geglu-tanh, reglu: act(G) * X, or without --gate one
      packed X [..., 2F] (first half the gate).
  positional-encode --method M --out Y.npy [method flags]
      sinusoidal [--input X.npy | --num-positions T --dim D] [--base B]
                 [--layout interleaved|concatenated] [positions]
          X + pe, or the table pe [T, D].
      learned --input X.npy --table P.npy [positions]
          X + P[position].
      rope --query Q.npy [--key K.npy --key-out K2.npy] [--layout bhtd|bthd]
           [--theta B] [--rotary-dim R] [--style half|interleaved]
           [--scaling none|linear|dynamic-ntk|yarn|llama3 --factor F
            --original-max-position-embeddings M [--beta-fast X] [--beta-slow X]
            [--attention-factor X] [--low-freq-factor X] [--high-freq-factor X]]
           [positions]
          The rotated query (and key).
      alibi (--num-heads H --query-length TQ --key-length TK | --scores S.npy)
            [--query-offset O] [--symmetric]
          The bias [H, TQ, TK], or S + bias.
      t5-bias --table T.npy --query-length TQ --key-length TK [--bidirectional]
              [--num-buckets N] [--max-distance D] [--query-offset O]
          The bucketed relative bias [H, TQ, TK].
      positions: --position-offset P (default 0) or --positions P0,P1,...
  block-forward --input H.npy --out Y.npy [--model NAME] [--layer-start L]
                [--num-layers N] [--position-offset P | --positions P0,...]
                [--sequence-lengths L0,L1,...] [--causal true|false]
                [--attention-stats] [--session ID]
                [--pipeline HOST:PORT,HOST:PORT,...]
      Hidden states [B, T, D] or [T, D] through N blocks (default 1) from L.
      With --pipeline: through every layer of the model split across those
      servers (each started with --layers=START:END), in the order of their
      spans, servers of the same span as replicas; --target is not used, the
      security flags are, on every server. Prints each stage's time.
      With --session: H is [T, D] (one sequence), its keys and values are
      appended to the session's cache, positions continue from the cached length
      (unless given), and the new cached length is printed (session_length).
      Not retried (a retry could append twice).
  open-session [--model NAME] [--layer-start L] [--num-layers N]
               [--max-length M] [--json]
      Opens a KV-cache session for N blocks (default 1) from L, holding up to
      M tokens (default: the model's maximum). Prints the session id (with --json
      also its ttlMs: it expires after that long without a call).
  close-session --session ID
      Closes the session and frees its cache.
  help
      This text (also --help, -h).

Tensor commands also take:
  --wire-dtype float32|bfloat16|float16   how tensors travel (default: the dtype
                                          of the main input file)
  --out-dtype float32|float16             dtype of the written files (default
                                          float32)
  --json                                  print one JSON object instead of text

Flags take their value as "--flag VALUE" or "--flag=VALUE". .npy files must be
float32 or float16, little-endian, C order.

Exit status: 0 success; 1 usage or file error; 2 RPC error, printed as
"error: CODE: message"; 3 health check answered but not SERVING.
)";

}  // namespace layerserve::client
