// Package layerserve is a Go client for the layerserve gRPC service: tensor helpers
// (this file) and a Client wrapper with deadlines (client.go).
package layerserve

// []float32 <-> layerserve.v1.Tensor.
//
// A Tensor holds product(shape) little-endian values of its dtype, row-major. FLOAT32
// is copied as is; BFLOAT16 and FLOAT16 are packed from float32 with
// round-to-nearest-even, as the server converts (the proto's DataType comment), so a
// value the client packs is the value the server would have made. Pure functions.

import (
	"encoding/binary"
	"fmt"
	"math"

	pb "github.com/layerserve/layerserve/client/go/gen/layerserve/v1"
)

// Float32ToBfloat16 returns the bfloat16 bits of f (the upper half of a binary32),
// rounded to nearest even. NaN stays a quiet NaN instead of rounding into Inf.
func Float32ToBfloat16(f float32) uint16 {
	bits := math.Float32bits(f)
	if bits&0x7fffffff > 0x7f800000 {
		return uint16(bits>>16) | 0x0040
	}
	return uint16((bits + 0x7fff + (bits>>16)&1) >> 16)
}

// Bfloat16ToFloat32 widens bfloat16 bits exactly.
func Bfloat16ToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// Float32ToFloat16 returns the IEEE binary16 bits of f, rounded to nearest even,
// subnormals kept, values from 65520 up Inf (numpy's npy_floatbits_to_halfbits).
func Float32ToFloat16(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := bits & 0x7f800000
	if exp >= 0x47800000 { // |f| >= 2^16, Inf or NaN.
		if exp == 0x7f800000 && bits&0x007fffff != 0 {
			return sign | 0x7e00 | uint16((bits&0x007fffff)>>13) // Quiet NaN, payload kept.
		}
		return sign | 0x7c00
	}
	if exp <= 0x38000000 { // |f| < 2^-14: a half subnormal or zero.
		if exp < 0x33000000 { // Below half of the smallest subnormal.
			return sign
		}
		// The implicit bit made explicit, then shifted into subnormal position; the
		// shift drops up to 11 bits, which the sticky test below still looks at.
		sig := (0x00800000 + bits&0x007fffff) >> (113 - exp>>23)
		if sig&0x3fff != 0x1000 || bits&0x7ff != 0 {
			sig += 0x1000
		}
		return sign | uint16(sig>>13) // A carry into the exponent is the right answer.
	}
	sig := bits & 0x007fffff
	if sig&0x3fff != 0x1000 { // Not an exact tie to even: round.
		sig += 0x1000
	}
	// A carry out of the significand bumps the exponent, up to Inf: also right.
	return sign | uint16((exp-0x38000000)>>13+sig>>13)
}

// Float16ToFloat32 widens binary16 bits exactly.
func Float16ToFloat32(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	mant := float32(h & 0x3ff)
	switch exp {
	case 0:
		return sign * mant * (1.0 / (1 << 24))
	case 0x1f:
		if mant != 0 {
			return float32(math.NaN())
		}
		return sign * float32(math.Inf(1))
	}
	return sign * (1 + mant/1024) * float32(math.Ldexp(1, exp-15))
}

// NumElements is the product of shape's dimensions.
func NumElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

func dtypeSize(dtype pb.DataType) (int, error) {
	switch dtype {
	case pb.DataType_FLOAT32:
		return 4, nil
	case pb.DataType_BFLOAT16, pb.DataType_FLOAT16:
		return 2, nil
	}
	return 0, fmt.Errorf("unsupported dtype %v", dtype)
}

// NewTensor packs values with shape as dtype.
func NewTensor(values []float32, shape []int64, dtype pb.DataType) (*pb.Tensor, error) {
	n := NumElements(shape)
	if int64(len(values)) != n {
		return nil, fmt.Errorf("NewTensor: shape %v needs %d values, got %d", shape, n, len(values))
	}
	size, err := dtypeSize(dtype)
	if err != nil {
		return nil, fmt.Errorf("NewTensor: %w", err)
	}
	data := make([]byte, len(values)*size)
	for i, v := range values {
		switch dtype {
		case pb.DataType_FLOAT32:
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		case pb.DataType_BFLOAT16:
			binary.LittleEndian.PutUint16(data[2*i:], Float32ToBfloat16(v))
		default:
			binary.LittleEndian.PutUint16(data[2*i:], Float32ToFloat16(v))
		}
	}
	return &pb.Tensor{Shape: append([]int64(nil), shape...), Dtype: dtype, Data: data}, nil
}

// MustTensor is NewTensor for values and shapes known to agree; it panics otherwise.
func MustTensor(values []float32, shape []int64, dtype pb.DataType) *pb.Tensor {
	t, err := NewTensor(values, shape, dtype)
	if err != nil {
		panic(err)
	}
	return t
}

// Values returns t's elements as float32 (16-bit dtypes widen exactly).
func Values(t *pb.Tensor) ([]float32, error) {
	size, err := dtypeSize(t.GetDtype())
	if err != nil {
		return nil, fmt.Errorf("Values: %w", err)
	}
	n := NumElements(t.GetShape())
	if int64(len(t.GetData())) != n*int64(size) {
		return nil, fmt.Errorf("Values: shape %v %v needs %d bytes, got %d", t.GetShape(),
			t.GetDtype(), n*int64(size), len(t.GetData()))
	}
	out := make([]float32, n)
	data := t.GetData()
	for i := range out {
		switch t.GetDtype() {
		case pb.DataType_FLOAT32:
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		case pb.DataType_BFLOAT16:
			out[i] = Bfloat16ToFloat32(binary.LittleEndian.Uint16(data[2*i:]))
		default:
			out[i] = Float16ToFloat32(binary.LittleEndian.Uint16(data[2*i:]))
		}
	}
	return out, nil
}
