// Types of layerserve-client (lib/index.js, and lib/index.mjs for `import`, whose
// default export is the whole module, as TypeScript sees a CommonJS one). Messages
// are plain objects with the .proto's field names (proto/layerserve/v1/layerserve.proto
// documents each field); lib/proto.js's loader options decide their shape: int64 as
// number, enums as names in responses (names or numbers in requests), every response
// field present (null for an unset message), bytes as Buffer.
import type {ChannelCredentials, ServiceError, status as grpcStatus,
             credentials as grpcCredentials, Client as GrpcClient} from '@grpc/grpc-js';

export type DataType = 'DATA_TYPE_UNSPECIFIED' | 'FLOAT32' | 'BFLOAT16' | 'FLOAT16' | 'INT8';
export type NormKind = 'NORM_KIND_UNSPECIFIED' | 'LAYER_NORM' | 'RMS_NORM';
export type Activation =
    'ACTIVATION_UNSPECIFIED' | 'RELU' | 'GELU' | 'GELU_TANH' | 'SILU' | 'SIGMOID' | 'TANH' |
    'QUICK_GELU' | 'SWIGLU' | 'GEGLU' | 'GEGLU_TANH' | 'REGLU';
export type RopeStyle = 'STYLE_UNSPECIFIED' | 'HALF' | 'INTERLEAVED';
export type RopeLayout = 'LAYOUT_UNSPECIFIED' | 'BHTD' | 'BTHD';
export type RopeScalingType = 'NONE' | 'LINEAR' | 'DYNAMIC_NTK' | 'YARN' | 'LLAMA3';
export type SinusoidalLayout = 'LAYOUT_UNSPECIFIED' | 'INTERLEAVED' | 'CONCATENATED';
export type ModelState = 'STATE_UNSPECIFIED' | 'READY' | 'FAILED';
/** A request's enum: its name or its number. */
export type EnumIn<E extends string> = E | number;

/** A tensor as it travels: product(shape) little-endian values of dtype, row-major. */
export interface Tensor {
  shape: number[];
  dtype: DataType;
  data: Buffer;
}
/** A tensor in a request: toTensor's result, or one built by hand. */
export interface TensorIn {
  shape: ArrayLike<number>;
  dtype: EnumIn<DataType>;
  data: Uint8Array;
}

// ---- requests (every field optional, as in proto3; see the .proto for the rules)

export interface NormalizeRequest {
  kind?: EnumIn<NormKind>;
  input?: TensorIn;
  weight?: TensorIn;
  bias?: TensorIn;
  epsilon?: number;
  weight_offset?: boolean;
  residual?: TensorIn;
  output_dtype?: EnumIn<DataType>;
}
export interface SinusoidalRequest {
  input?: TensorIn;
  num_positions?: number;
  dim?: number;
  base?: number;
  layout?: EnumIn<SinusoidalLayout>;
  position_offset?: number;
  positions?: number[];
}
export interface LearnedRequest {
  input?: TensorIn;
  table?: TensorIn;
  position_offset?: number;
  positions?: number[];
}
export interface RopeScaling {
  type?: EnumIn<RopeScalingType>;
  factor?: number;
  original_max_position_embeddings?: number;
  beta_fast?: number;
  beta_slow?: number;
  attention_factor?: number;
  low_freq_factor?: number;
  high_freq_factor?: number;
}
export interface RopeRequest {
  query?: TensorIn;
  key?: TensorIn;
  layout?: EnumIn<RopeLayout>;
  theta?: number;
  rotary_dim?: number;
  style?: EnumIn<RopeStyle>;
  scaling?: RopeScaling;
  position_offset?: number;
  positions?: number[];
}
export interface AlibiRequest {
  num_heads?: number;
  query_length?: number;
  key_length?: number;
  query_offset?: number;
  symmetric?: boolean;
  scores?: TensorIn;
}
export interface T5BiasRequest {
  table?: TensorIn;
  bidirectional?: boolean;
  num_buckets?: number;
  max_distance?: number;
  query_length?: number;
  key_length?: number;
  query_offset?: number;
}
/** One method (the oneof): give exactly one of sinusoidal, learned, rope, alibi, t5_bias. */
export interface PositionalEncodeRequest {
  sinusoidal?: SinusoidalRequest;
  learned?: LearnedRequest;
  rope?: RopeRequest;
  alibi?: AlibiRequest;
  t5_bias?: T5BiasRequest;
  output_dtype?: EnumIn<DataType>;
}
export interface ActivateRequest {
  activation?: EnumIn<Activation>;
  input?: TensorIn;
  gate?: TensorIn;
  output_dtype?: EnumIn<DataType>;
}
/** With session_id (one session) or session_ids (many): a session step, sent once, with
 * the x-layerserve-session header. */
export interface BlockForwardRequest {
  model?: string;
  layer_start?: number;
  num_layers?: number;
  hidden_states?: TensorIn;
  position_offset?: number;
  positions?: number[];
  sequence_lengths?: number[];
  causal?: boolean;
  want_attention_stats?: boolean;
  session_id?: string;
  output_dtype?: EnumIn<DataType>;
  session_ids?: string[];
}
export interface OpenSessionRequest {
  model?: string;
  layer_start?: number;
  num_layers?: number;
  max_length?: number;
}

// ---- responses (every field present)

export interface NormalizeResponse {
  output: Tensor;
  /** input + residual; null without a residual. */
  residual_out: Tensor | null;
}
export interface PositionalEncodeResponse {
  output: Tensor;
  /** RoPE's rotated key; null otherwise. */
  key: Tensor | null;
}
export interface ActivateResponse {
  output: Tensor;
}
export interface AttentionStats {
  layer: number;
  head_entropy_nats: number[];
}
export interface BlockForwardResponse {
  hidden_states: Tensor;
  attention_stats: AttentionStats[];
  /** A session_id call's session length after it; 0 otherwise. */
  session_length: number;
  /** A session_ids call's lengths, one per session in order; empty otherwise. */
  session_lengths: number[];
}
export interface RopeScalingInfo {
  type: RopeScalingType;
  factor: number;
  original_max_position_embeddings: number;
  beta_fast: number;
  beta_slow: number;
  attention_factor: number;
  low_freq_factor: number;
  high_freq_factor: number;
}
export interface RopeConfig {
  theta: number;
  rotary_dim: number;
  style: RopeStyle;
  scaling: RopeScalingInfo | null;
}
export interface ModelInfo {
  name: string;
  architecture: string;
  state: ModelState;
  error: string;
  is_default: boolean;
  num_layers: number;
  hidden_size: number;
  num_attention_heads: number;
  num_key_value_heads: number;
  head_dim: number;
  intermediate_size: number;
  activation: Activation;
  norm: NormKind;
  norm_epsilon: number;
  /** null for a model without rotary embeddings (GPT-2). */
  rope: RopeConfig | null;
  max_position_embeddings: number;
  weight_dtype: DataType;
  span_layer_start: number;
  span_num_layers: number;
  weight_group_size: number;
  version: number;
  reload_error: string;
}
export interface OpenSessionResponse {
  session_id: string;
  ttl_ms: number;
}

// ---- the client

/** How UNAVAILABLE calls are retried; each field defaults to DEFAULT_RETRY's. */
export interface RetryOptions {
  /** Sends in all, the first included (4). */
  maxAttempts?: number;
  /** The cap of the first wait (50 ms). */
  initialBackoffMs?: number;
  /** No wait is longer (2000 ms). */
  maxBackoffMs?: number;
  /** Growth of the cap per retry (2). */
  multiplier?: number;
}

export interface LayerClientOptions {
  /** Default per-call deadline, 30000 ms. */
  deadlineMs?: number;
  /** Sent as "authorization: Bearer <token>" on every LayerService call. */
  token?: string;
  /** A file holding the token, read once by the constructor. Not with token. */
  tokenFile?: string;
  /** PEM file of the CA that signed the server's certificate: TLS. */
  tlsCa?: string;
  /** PEM files of a client certificate and its key, both or neither: TLS. */
  tlsCert?: string;
  tlsKey?: string;
  /** TLS built by hand (credentials.createSsl(...)); not with tls*. */
  credentials?: ChannelCredentials;
  /** Send and receive limit, 256 MiB. */
  maxMessageBytes?: number;
  /** false: never retry. */
  retry?: RetryOptions | false;
  /** The directory holding layerserve/v1/layerserve.proto (default: the package's copy). */
  protoDir?: string;
  /** The grpc.health.v1 health.proto file (default: the package's copy). */
  healthProto?: string;
}

/** {deadlineMs} relative, or {deadline} a Date or epoch milliseconds. */
export interface CallOptions {
  deadlineMs?: number;
  deadline?: Date | number;
}

export interface StepOptions {
  /** B entries in [1, T]: row b adds its first sequenceLengths[b] tokens. */
  sequenceLengths?: number[];
}

/** grpc.health.v1's answer: 'SERVING' or 'NOT_SERVING' from layerserve. */
export type HealthStatus = 'UNKNOWN' | 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN';

/** A failed call rejects with grpc-js's ServiceError: code, details, metadata. */
export type LayerServeError = ServiceError;

export class LayerClient {
  constructor(target: string, options?: LayerClientOptions);
  readonly deadlineMs: number;
  /** The grpc-js stubs, for calls this class does not wrap. */
  readonly stub: GrpcClient;
  readonly sessionStub: GrpcClient;
  readonly healthStub: GrpcClient;
  normalize(request: NormalizeRequest, callOptions?: CallOptions): Promise<NormalizeResponse>;
  positionalEncode(request: PositionalEncodeRequest,
                   callOptions?: CallOptions): Promise<PositionalEncodeResponse>;
  activate(request: ActivateRequest, callOptions?: CallOptions): Promise<ActivateResponse>;
  blockForward(request: BlockForwardRequest,
               callOptions?: CallOptions): Promise<BlockForwardResponse>;
  /** Many sessions (ids or openSession responses) in one BlockForward; rejects unless
   * every one advances. */
  step(sessions: Array<string | {session_id: string}>, hiddenStates: TensorIn,
       options?: StepOptions, callOptions?: CallOptions): Promise<BlockForwardResponse>;
  listModels(callOptions?: CallOptions): Promise<ModelInfo[]>;
  /** '' = the server's default model. */
  getModel(name?: string, callOptions?: CallOptions): Promise<ModelInfo>;
  openSession(request: OpenSessionRequest,
              callOptions?: CallOptions): Promise<OpenSessionResponse>;
  closeSession(sessionId: string, callOptions?: CallOptions): Promise<void>;
  health(service?: string, callOptions?: CallOptions): Promise<HealthStatus>;
  close(): void;
}

export const DEFAULT_RETRY: Readonly<Required<RetryOptions>>;
/** 'x-layerserve-session': the header carrying a session call's session id. */
export const SESSION_HEADER: 'x-layerserve-session';
/** gRPC status codes: status.INVALID_ARGUMENT, ...; status[code] is the name. */
export const status: typeof grpcStatus;
export const credentials: typeof grpcCredentials;
/** The package's version. */
export const VERSION: string;

// ---- tensors

/** Floating dtypes toTensor packs and fromTensor reads. */
export type FloatDataType = 'FLOAT32' | 'BFLOAT16' | 'FLOAT16';
export function toTensor(values: ArrayLike<number>, shape: ArrayLike<number>,
                         dtype?: FloatDataType): Tensor & {dtype: FloatDataType};
export function fromTensor(tensor: {shape: ArrayLike<number>; dtype: DataType;
                                    data: Uint8Array}): Float32Array;
export function numElements(shape: ArrayLike<number>): number;
export function floatToBfloat16Bits(x: number): number;
export function bfloat16BitsToFloat(bits: number): number;
export function floatToHalfBits(x: number): number;
export function halfBitsToFloat(bits: number): number;

// ---- the .proto loading (lib/proto.js)

export interface LoaderOptions {
  keepCase: true;
  longs: NumberConstructor;
  enums: StringConstructor;
  defaults: true;
  oneofs: true;
}
export const LOADER_OPTIONS: Readonly<LoaderOptions>;
export const DEFAULT_PROTO_DIR: string;
export const DEFAULT_HEALTH_PROTO: string;
/** The layerserve.v1 namespace: the LayerService constructor and the message types. */
export function loadLayerServe(protoDir?: string): any;
/** The grpc.health.v1 namespace: the Health constructor. */
export function loadHealth(healthProto?: string): any;
