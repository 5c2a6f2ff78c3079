'use strict';
// LayerClient: every served layerserve RPC and the standard health check, as
// promises with a deadline on every call.
//
// One LayerClient holds one gRPC channel (and a second one for session steps, which
// are never retried: retry.js); calls on it may run concurrently. Many large
// tensors on one channel share one HTTP/2 connection: for throughput, use a client per
// concurrent caller (one connection carried ~0.5 GB/s of 4 MB messages, one per thread
// ~0.85 GB/s: docs/perf/2026-11-30-grpc-end-to-end.md).
//
// A failed call rejects with grpc-js's ServiceError: `code` (a number, compare with
// `status.INVALID_ARGUMENT`...; `status[code]` is its name), `details` (the server's
// message, e.g. "input.data: shape [3,5] FLOAT32 needs 60 bytes, got 56"), `metadata`.
const grpc = require('@grpc/grpc-js');
const {loadLayerServe, loadHealth} = require('./proto');
const {resolveToken, resolveCredentials, bearerInterceptor} = require('./security');
const {DEFAULT_RETRY, resolveRetry, retryChannelOptions} = require('./retry');

const DEFAULT_DEADLINE_MS = 30000;
// The metadata header carrying a session call's session id, as the Python and C++
// clients send it: a load balancer routing on it (deploy/nginx/nginx.conf) keeps a
// session's calls on the replica that holds its KV cache.
const SESSION_HEADER = 'x-layerserve-session';
// The server's default --max-message-bytes; grpc-js would otherwise refuse replies
// over 4 MiB.
const DEFAULT_MAX_MESSAGE_BYTES = 256 << 20;

class LayerClient {
  // target: "host:port". options:
  //   deadlineMs       default per-call deadline (30 s); each call may pass its own.
  //   token            a bearer token, sent as "authorization: Bearer <token>" on every
  //                    LayerService call (not on health, which the server leaves open).
  //   tokenFile        a file holding the token, read once here; surrounding whitespace
  //                    is dropped. Give token or tokenFile, not both.
  //   tlsCa            PEM file of the CA that signed the server's certificate: TLS.
  //   tlsCert, tlsKey  PEM files of a client certificate and its key, both or neither
  //                    (for a server with --tls-client-ca): TLS with that certificate.
  //   credentials      grpc.credentials.createSsl(...) for TLS built by hand; plaintext
  //                    when neither it nor a tls* option is given; not with tls*.
  // A bad combination, or a file that cannot be read, throws an Error naming the
  // options and the path (never the token).
  //   maxMessageBytes  send and receive limit (256 MiB, the server's default).
//   retry            how UNAVAILABLE calls are retried (retry.js): {maxAttempts,
//                    initialBackoffMs, maxBackoffMs, multiplier}, each defaulting to
//                    DEFAULT_RETRY's (4 sends, 50 ms, 2 s, 2); false never retries.
//                    Session steps (blockForward with a session_id or session_ids,
//                    step) are sent once.
  //   protoDir, healthProto   where the .proto files are (see proto.js).
  constructor(target, options = {}) {
    const maxBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    const token = resolveToken(options);
    const credentials = resolveCredentials(options);
    const {LayerService} = loadLayerServe(options.protoDir);
    const retry = resolveRetry(options.retry);
    this.deadlineMs = options.deadlineMs ?? DEFAULT_DEADLINE_MS;
    const channelOptions = (policy) => ({
      'grpc.max_receive_message_length': maxBytes,
      'grpc.max_send_message_length': maxBytes,
      ...retryChannelOptions(policy),
      // The token is added by this stub's interceptor, so it rides on every
      // LayerService call, sessions included, and on calls made on this.stub directly.
      ...(token === null ? {} : {interceptors: [bearerInterceptor(token)]}),
    });
    this.stub = new LayerService(target, credentials, channelOptions(retry));
    // Session steps' own channel, never retrying (retry.js says why); it connects on
    // its first call only.
    this.sessionStub = retry === null ? this.stub :
        new LayerService(target, credentials, channelOptions(null));
    // The health stub rides on the same channel (one connection to the server),
    // without the interceptor: the health check carries no token.
    const {Health} = loadHealth(options.healthProto);
    this.healthStub = new Health(target, credentials,
                                 {channelOverride: this.stub.getChannel()});
  }

  // Each RPC takes the request as a plain object with the .proto's field names (see
  // proto.js for the conventions) and resolves to the response object.
  // callOptions: {deadlineMs} (relative) or {deadline} (a Date or epoch ms).
  normalize(request, callOptions) {
    return this._unary(this.stub, 'Normalize', request, callOptions);
  }

  positionalEncode(request, callOptions) {
    return this._unary(this.stub, 'PositionalEncode', request, callOptions);
  }

  activate(request, callOptions) {
    return this._unary(this.stub, 'Activate', request, callOptions);
  }

  // A request with session_id (one session) or session_ids (many) appends to KV
  // caches: it goes on the session channel, sent once (retry.js), with the session id
  // in the x-layerserve-session header (session_ids: the first one's, as the Python
  // client does; the sessions of one call live on one replica).
  blockForward(request, callOptions) {
    const sessionIds = request.session_ids ?? [];
    const sessionStep = Boolean(request.session_id) || sessionIds.length > 0;
    return this._unary(sessionStep ? this.sessionStub : this.stub, 'BlockForward', request,
                       callOptions, request.session_id || sessionIds[0]);
  }

  // Many KV-cache sessions in one BlockForward call (session_ids). sessions: an array of
  // session ids or openSession responses ({session_id}). Row b of hiddenStates [B, T, D]
  // ([T, D]: one session) continues sessions[b], bit for bit as that session's own call
  // with that row would, its positions continuing from the session's length.
  // options.sequenceLengths (B entries in [1, T]) makes the rows ragged: row b adds its
  // first sequenceLengths[b] tokens, and its padded rows of the output are zeros.
  // Resolves to the BlockForward response: hidden_states (every row) and
  // session_lengths (each session's new length, in order). All or nothing: when one
  // session is unknown, busy, full or mismatched the call rejects with the code that
  // session alone would get and details naming the row ('session_ids[2]: ...'), and no
  // session advances. Sent once, never retried, as a session_id call.
  async step(sessions, hiddenStates, options = {}, callOptions) {
    if (!Array.isArray(sessions) || sessions.length === 0) {
      throw new RangeError('step: sessions must be a non-empty array of session ids');
    }
    const sessionIds = sessions.map((s, b) => {
      const id = typeof s === 'string' ? s : s?.session_id;
      if (typeof id !== 'string' || id === '') {
        throw new TypeError(`step: sessions[${b}] is neither a session id nor {session_id}`);
      }
      return id;
    });
    const response = await this.blockForward({
      session_ids: sessionIds, hidden_states: hiddenStates,
      sequence_lengths: options.sequenceLengths ?? []}, callOptions);
    if (response.session_lengths.length !== sessionIds.length) {
      throw new Error(`step: response session_lengths has ${response.session_lengths.length} ` +
                      `entries for ${sessionIds.length} sessions`);
    }
    return response;
  }

  // Resolves to the array of ModelInfo.
  async listModels(callOptions) {
    return (await this._unary(this.stub, 'ListModels', {}, callOptions)).models;
  }

  // name '' = the server's default model. NOT_FOUND if unknown.
  getModel(name = '', callOptions) {
    return this._unary(this.stub, 'GetModel', {name}, callOptions);
  }

  // OpenSession: a KV-cache session for incremental decoding; resolves to
  // {session_id, ttl_ms}. Pass session_id in blockForward requests, or many sessions
  // to step.
  openSession(request, callOptions) {
    return this._unary(this.stub, 'OpenSession', request, callOptions);
  }

  // CloseSession: frees the session's cache. NOT_FOUND if unknown or expired. Carries
  // the x-layerserve-session header, to reach the session's replica.
  async closeSession(sessionId, callOptions) {
    await this._unary(this.stub, 'CloseSession', {session_id: sessionId}, callOptions,
                      sessionId);
  }

  // grpc.health.v1 Check: resolves to 'SERVING' or 'NOT_SERVING' ('' = the server;
  // the service name 'layerserve.v1.LayerService' answers the same).
  async health(service = '', callOptions) {
    return (await this._unary(this.healthStub, 'Check', {service}, callOptions)).status;
  }

  // Closes the channels. Calls in flight fail with CANCELLED.
  close() {
    this.stub.close();
    if (this.sessionStub !== this.stub) this.sessionStub.close();
  }

  _unary(stub, method, request, callOptions = {}, sessionId = '') {
    const deadline = callOptions.deadline ??
        Date.now() + (callOptions.deadlineMs ?? this.deadlineMs);
    return new Promise((resolve, reject) => {
      // In here, a value grpc-js refuses as a header (a line break) rejects the call.
      const metadata = new grpc.Metadata();
      if (sessionId) metadata.set(SESSION_HEADER, String(sessionId));
      stub[method](request, metadata, {deadline}, (error, response) => {
        if (error) reject(error);
        else resolve(response);
      });
    });
  }
}

module.exports = {LayerClient, DEFAULT_RETRY, SESSION_HEADER, status: grpc.status,
                  credentials: grpc.credentials};
