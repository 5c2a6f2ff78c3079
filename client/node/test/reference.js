'use strict';
// The tests' reference math: each op written straight from the formula in the
// proto's comments, in float64 (JS numbers), row-major flat arrays.

// Seeded normal samples (mulberry32 + Box-Muller): the same numbers on every run.
function randn(n, seed) {
  let a = seed >>> 0;
  const uniform = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) + 0.5) / 4294967296;
  };
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    out[i] = Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform());
  }
  return out;
}

// LayerNorm over the last dim d: (x - mean) / sqrt(var + eps) * w + b.
function layerNorm(x, d, weight, bias, eps) {
  const out = new Float64Array(x.length);
  for (let r = 0; r < x.length / d; r++) {
    const row = x.subarray(r * d, (r + 1) * d);
    const mean = row.reduce((s, v) => s + v, 0) / d;
    const variance = row.reduce((s, v) => s + (v - mean) ** 2, 0) / d;
    for (let i = 0; i < d; i++) {
      out[r * d + i] = (row[i] - mean) / Math.sqrt(variance + eps) * weight[i] + bias[i];
    }
  }
  return out;
}

// RMSNorm over the last dim d: x / sqrt(mean(x^2) + eps) * scale.
function rmsNorm(x, d, scale, eps) {
  const out = new Float64Array(x.length);
  for (let r = 0; r < x.length / d; r++) {
    const row = x.subarray(r * d, (r + 1) * d);
    const meanSquare = row.reduce((s, v) => s + v * v, 0) / d;
    for (let i = 0; i < d; i++) out[r * d + i] = row[i] / Math.sqrt(meanSquare + eps) * scale[i];
  }
  return out;
}

const silu = (x) => x / (1 + Math.exp(-x));
const geluTanh = (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));

// Sinusoidal table rows for `positions`, width d: angle(p, i) = p * base^(-2i/d).
function sinusoidal(positions, d, base, layout) {
  const out = new Float64Array(positions.length * d);
  positions.forEach((p, t) => {
    for (let i = 0; i < d / 2; i++) {
      const angle = p * base ** (-2 * i / d);
      const [sinAt, cosAt] = layout === 'CONCATENATED' ? [i, d / 2 + i] : [2 * i, 2 * i + 1];
      out[t * d + sinAt] = Math.sin(angle);
      out[t * d + cosAt] = Math.cos(angle);
    }
  });
  return out;
}

// RoPE, HALF style, on [B, H, T, Dh] (BHTD): dims i and i + rot/2 rotate together.
function ropeHalf(x, [B, H, T, Dh], positions, theta, rot) {
  const out = Float64Array.from(x);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      for (let t = 0; t < T; t++) {
        const base = ((b * H + h) * T + t) * Dh;
        for (let i = 0; i < rot / 2; i++) {
          const angle = positions[t] * theta ** (-2 * i / rot);
          const x1 = x[base + i];
          const x2 = x[base + i + rot / 2];
          out[base + i] = x1 * Math.cos(angle) - x2 * Math.sin(angle);
          out[base + i + rot / 2] = x2 * Math.cos(angle) + x1 * Math.sin(angle);
        }
      }
    }
  }
  return out;
}

// ALiBi slopes for any head count, as the proto's Alibi comment states.
function alibiSlopes(heads) {
  const powerOfTwo = (n) => Array.from({length: n}, (_, h) => 2 ** (-8 * (h + 1) / n));
  const closest = 2 ** Math.floor(Math.log2(heads));
  if (closest === heads) return powerOfTwo(heads);
  const extra = powerOfTwo(2 * closest).filter((_, i) => i % 2 === 0);
  return [...powerOfTwo(closest), ...extra.slice(0, heads - closest)];
}

// Causal ALiBi bias [H, Tq, Tk]: slope[h] * (j - (offset + i)).
function alibiBias(heads, tq, tk, offset) {
  const slopes = alibiSlopes(heads);
  const out = new Float64Array(heads * tq * tk);
  for (let h = 0; h < heads; h++) {
    for (let i = 0; i < tq; i++) {
      for (let j = 0; j < tk; j++) out[(h * tq + i) * tk + j] = slopes[h] * (j - (offset + i));
    }
  }
  return out;
}

// Hugging Face T5's _relative_position_bucket.
function t5Bucket(relative, bidirectional, numBuckets, maxDistance) {
  let bucket = 0;
  let n = numBuckets;
  let distance;
  if (bidirectional) {
    n = Math.floor(n / 2);
    if (relative > 0) bucket += n;
    distance = Math.abs(relative);
  } else {
    distance = Math.max(-relative, 0);
  }
  const maxExact = Math.floor(n / 2);
  if (distance < maxExact) return bucket + distance;
  const large = maxExact + Math.floor(
      Math.log(distance / maxExact) / Math.log(maxDistance / maxExact) * (n - maxExact));
  return bucket + Math.min(large, n - 1);
}

// T5 bias [H, Tq, Tk] from a table [numBuckets, H].
function t5Bias(table, heads, tq, tk, bidirectional, numBuckets, maxDistance) {
  const out = new Float64Array(heads * tq * tk);
  for (let h = 0; h < heads; h++) {
    for (let i = 0; i < tq; i++) {
      for (let j = 0; j < tk; j++) {
        const bucket = t5Bucket(j - i, bidirectional, numBuckets, maxDistance);
        out[(h * tq + i) * tk + j] = table[bucket * heads + h];
      }
    }
  }
  return out;
}

module.exports = {randn, layerNorm, rmsNorm, silu, geluTanh, sinusoidal, ropeHalf,
                  alibiSlopes, alibiBias, t5Bucket, t5Bias};
