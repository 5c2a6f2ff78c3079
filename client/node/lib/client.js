'use strict';
// LayerClient: every served layerserve RPC and the standard health check, as
// promises with a deadline on every call.
//
// One LayerClient holds one gRPC channel; calls on it may run concurrently. Many large
// tensors on one channel share one HTTP/2 connection: for throughput, use a client per
// concurrent caller (DESIGN.md "Performance facts").
//
// A failed call rejects with grpc-js's ServiceError: `code` (a number, compare with
// `status.INVALID_ARGUMENT`...; `status[code]` is its name), `details` (the server's
// message, e.g. "input.data: shape [3,5] FLOAT32 needs 60 bytes, got 56"), `metadata`.
const grpc = require('@grpc/grpc-js');
const {loadLayerServe, loadHealth} = require('./proto');

const DEFAULT_DEADLINE_MS = 30000;
// The server's default --max-message-bytes; grpc-js would otherwise refuse replies
// over 4 MiB.
const DEFAULT_MAX_MESSAGE_BYTES = 256 << 20;

class LayerClient {
  // target: "host:port". options:
  //   deadlineMs       default per-call deadline (30 s); each call may pass its own.
  //   credentials      grpc.credentials.createSsl(...) for TLS; insecure by default.
  //   maxMessageBytes  send and receive limit (256 MiB, the server's default).
  //   protoDir, healthProto   where the .proto files are (see proto.js).
  constructor(target, options = {}) {
    const maxBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    const credentials = options.credentials ?? grpc.credentials.createInsecure();
    const {LayerService} = loadLayerServe(options.protoDir);
    this.deadlineMs = options.deadlineMs ?? DEFAULT_DEADLINE_MS;
    this.stub = new LayerService(target, credentials, {
      'grpc.max_receive_message_length': maxBytes,
      'grpc.max_send_message_length': maxBytes,
    });
    // The health stub rides on the same channel (one connection to the server).
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

  blockForward(request, callOptions) {
    return this._unary(this.stub, 'BlockForward', request, callOptions);
  }

  // Resolves to the array of ModelInfo.
  async listModels(callOptions) {
    return (await this._unary(this.stub, 'ListModels', {}, callOptions)).models;
  }

  // name '' = the server's default model. NOT_FOUND if unknown.
  getModel(name = '', callOptions) {
    return this._unary(this.stub, 'GetModel', {name}, callOptions);
  }

  // grpc.health.v1 Check: resolves to 'SERVING' or 'NOT_SERVING' ('' = the server;
  // the service name 'layerserve.v1.LayerService' answers the same).
  async health(service = '', callOptions) {
    return (await this._unary(this.healthStub, 'Check', {service}, callOptions)).status;
  }

  // Closes the channel (shared by both stubs). Calls in flight fail with CANCELLED.
  close() {
    this.stub.close();
  }

  _unary(stub, method, request, callOptions = {}) {
    const deadline = callOptions.deadline ??
        Date.now() + (callOptions.deadlineMs ?? this.deadlineMs);
    return new Promise((resolve, reject) => {
      stub[method](request, {deadline}, (error, response) => {
        if (error) reject(error);
        else resolve(response);
      });
    });
  }
}

module.exports = {LayerClient, status: grpc.status, credentials: grpc.credentials};
