'use strict';
// Retries of UNAVAILABLE calls, as the Python and C++ clients do
// (client/python/layerserve_client/retry.py): up to maxAttempts sends, exponential
// backoff with jitter, never past the call's deadline, and only UNAVAILABLE (a
// draining or unreachable server): every other code is the answer. gRPC does it from
// the channel's service config (a retryPolicy, grpc-js >= 1.7), so a call
// made on client.stub directly is retried too.
//
// A BlockForward with a session_id, or session_ids (many sessions in one call), must be
// sent once: a step lost on the way back may have appended to the sessions' KV caches
// already, and a second send would append twice. A service config names methods, not
// requests, so the LayerClient sends session steps on a second channel whose config
// has no retryPolicy.

const DEFAULT_RETRY = Object.freeze({
  maxAttempts: 4,          // Sends in all, the first included.
  initialBackoffMs: 50,    // The cap of the first wait.
  maxBackoffMs: 2000,      // No wait is longer.
  multiplier: 2,           // Growth of the cap per retry.
});

// options.retry: undefined (DEFAULT_RETRY), false (never retry), or an object whose
// fields override DEFAULT_RETRY's. Returns the policy, or null for no retries; throws
// on a bad one.
function resolveRetry(retry) {
  if (retry === false) return null;
  const policy = {...DEFAULT_RETRY, ...(retry ?? {})};
  const {maxAttempts, initialBackoffMs, maxBackoffMs, multiplier} = policy;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1) {
    throw new Error(`retry.maxAttempts must be an integer >= 1, got ${maxAttempts}`);
  }
  if (!(initialBackoffMs > 0 && maxBackoffMs >= initialBackoffMs && multiplier >= 1)) {
    throw new Error('retry: need 0 < initialBackoffMs <= maxBackoffMs and multiplier >= 1');
  }
  return maxAttempts === 1 ? null : policy;
}

// The channel options that make a channel retry under `policy` (null: none).
function retryChannelOptions(policy) {
  if (policy === null) return {'grpc.enable_retries': 0};
  const seconds = (ms) => `${ms / 1000}s`;
  const serviceConfig = {
    methodConfig: [{
      name: [{service: 'layerserve.v1.LayerService'}, {service: 'grpc.health.v1.Health'}],
      retryPolicy: {
        maxAttempts: policy.maxAttempts,
        initialBackoff: seconds(policy.initialBackoffMs),
        maxBackoff: seconds(policy.maxBackoffMs),
        backoffMultiplier: policy.multiplier,
        retryableStatusCodes: ['UNAVAILABLE'],
      },
    }],
  };
  return {
    'grpc.service_config': JSON.stringify(serviceConfig),
    // grpc-js caps maxAttempts at 5 unless told otherwise.
    'grpc-node.retry_max_attempts_limit': policy.maxAttempts,
    // Reconnect at the pace of the retries: with the default first reconnect after
    // 1 s, retries sooner than that would all fail at once.
    'grpc.initial_reconnect_backoff_ms': policy.initialBackoffMs,
    'grpc.max_reconnect_backoff_ms': policy.maxBackoffMs,
  };
}

module.exports = {DEFAULT_RETRY, resolveRetry, retryChannelOptions};
