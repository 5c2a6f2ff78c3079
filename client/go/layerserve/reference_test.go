package layerserve

// The tests' reference math: each op written straight from the formula in the
// proto's comments, in float64, row-major flat slices.

import (
	"math"
	"math/rand"
)

// randn returns n seeded normal samples: the same numbers on every run.
func randn(n int, seed int64) []float32 {
	r := rand.New(rand.NewSource(seed))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64())
	}
	return out
}

func ones(n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// layerNorm over the last dim d: (x - mean) / sqrt(var + eps) * w + b.
func layerNorm(x []float32, d int, w, b []float32, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/d; r++ {
		row := x[r*d : (r+1)*d]
		mean, variance := 0.0, 0.0
		for _, v := range row {
			mean += float64(v)
		}
		mean /= float64(d)
		for _, v := range row {
			variance += (float64(v) - mean) * (float64(v) - mean)
		}
		variance /= float64(d)
		for i, v := range row {
			out[r*d+i] = (float64(v)-mean)/math.Sqrt(variance+eps)*float64(w[i]) + float64(b[i])
		}
	}
	return out
}

// rmsNorm over the last dim d: x / sqrt(mean(x^2) + eps) * scale.
func rmsNorm(x []float32, d int, scale []float64, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/d; r++ {
		row := x[r*d : (r+1)*d]
		meanSquare := 0.0
		for _, v := range row {
			meanSquare += float64(v) * float64(v)
		}
		meanSquare /= float64(d)
		for i, v := range row {
			out[r*d+i] = float64(v) / math.Sqrt(meanSquare+eps) * scale[i]
		}
	}
	return out
}

func silu(x float64) float64 { return x / (1 + math.Exp(-x)) }

// gelu is the exact erf form.
func gelu(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

// sinusoidal returns the rows of the table for positions, width d:
// angle(p, i) = p * base^(-2i/d), interleaved or concatenated sin/cos.
func sinusoidal(positions []int, d int, base float64, concatenated bool) []float64 {
	out := make([]float64, len(positions)*d)
	for t, p := range positions {
		for i := 0; i < d/2; i++ {
			angle := float64(p) * math.Pow(base, -2*float64(i)/float64(d))
			sinAt, cosAt := 2*i, 2*i+1
			if concatenated {
				sinAt, cosAt = i, d/2+i
			}
			out[t*d+sinAt] = math.Sin(angle)
			out[t*d+cosAt] = math.Cos(angle)
		}
	}
	return out
}

// ropeInterleaved rotates [B, T, H, Dh] (BTHD) in INTERLEAVED style: dims 2i and
// 2i+1 rotate together by positions[t] * theta^(-2i/rot); dims past rot pass through.
func ropeInterleaved(x []float32, b, t, h, dh int, positions []int, theta float64, rot int) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	for row := 0; row < b*t*h; row++ {
		p := float64(positions[(row/h)%t])
		base := row * dh
		for i := 0; i < rot/2; i++ {
			angle := p * math.Pow(theta, -2*float64(i)/float64(rot))
			x1, x2 := float64(x[base+2*i]), float64(x[base+2*i+1])
			out[base+2*i] = x1*math.Cos(angle) - x2*math.Sin(angle)
			out[base+2*i+1] = x2*math.Cos(angle) + x1*math.Sin(angle)
		}
	}
	return out
}

// alibiSlopes for any head count, as the proto's Alibi comment states.
func alibiSlopes(heads int) []float64 {
	powerOfTwo := func(n int) []float64 {
		s := make([]float64, n)
		for h := range s {
			s[h] = math.Pow(2, -8*float64(h+1)/float64(n))
		}
		return s
	}
	closest := 1 << int(math.Floor(math.Log2(float64(heads))))
	slopes := powerOfTwo(closest)
	extra := powerOfTwo(2 * closest)
	for i := 0; len(slopes) < heads; i += 2 {
		slopes = append(slopes, extra[i])
	}
	return slopes
}

// alibiSymmetric is the symmetric bias [H, Tq, Tk]: -slope[h] * |j - (offset + i)|.
func alibiSymmetric(heads, tq, tk, offset int) []float64 {
	slopes := alibiSlopes(heads)
	out := make([]float64, 0, heads*tq*tk)
	for h := 0; h < heads; h++ {
		for i := 0; i < tq; i++ {
			for j := 0; j < tk; j++ {
				out = append(out, -slopes[h]*math.Abs(float64(j-(offset+i))))
			}
		}
	}
	return out
}

// t5Bucket is Hugging Face T5's _relative_position_bucket.
func t5Bucket(relative int, bidirectional bool, numBuckets, maxDistance int) int {
	bucket, n, distance := 0, numBuckets, 0
	if bidirectional {
		n /= 2
		if relative > 0 {
			bucket += n
		}
		distance = relative
		if distance < 0 {
			distance = -distance
		}
	} else if relative < 0 {
		distance = -relative
	}
	maxExact := n / 2
	if distance < maxExact {
		return bucket + distance
	}
	large := maxExact + int(math.Log(float64(distance)/float64(maxExact))/
		math.Log(float64(maxDistance)/float64(maxExact))*float64(n-maxExact))
	if large > n-1 {
		large = n - 1
	}
	return bucket + large
}

// t5Bias is the bias [H, Tq, Tk] from a table [numBuckets, H].
func t5Bias(table []float32, heads, tq, tk, offset int, bidirectional bool, numBuckets, maxDistance int) []float64 {
	out := make([]float64, 0, heads*tq*tk)
	for h := 0; h < heads; h++ {
		for i := 0; i < tq; i++ {
			for j := 0; j < tk; j++ {
				bucket := t5Bucket(j-(offset+i), bidirectional, numBuckets, maxDistance)
				out = append(out, float64(table[bucket*heads+h]))
			}
		}
	}
	return out
}
