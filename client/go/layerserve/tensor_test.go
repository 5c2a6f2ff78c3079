package layerserve

// The tensor helpers on their own: 16-bit packing (round to nearest even, subnormals,
// overflow, NaN) on hand-checked bit patterns, and the Tensor round trip.

import (
	"math"
	"strings"
	"testing"

	pb "github.com/layerserve/layerserve/client/go/gen/layerserve/v1"
)

func TestFloat16RoundsToNearestEven(t *testing.T) {
	cases := []struct {
		value float64
		bits  uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, // Largest finite half.
		{65519.996, 0x7bff}, {65520, 0x7c00}, // Halfway to 2^16 rounds up to Inf.
		{1e6, 0x7c00}, {math.Inf(-1), 0xfc00},
		{1 + 0x1p-11, 0x3c00},           // Tie, even neighbour below.
		{1 + 3*0x1p-11, 0x3c02},         // Tie, even neighbour above.
		{1 + 0x1p-11 + 0x1p-20, 0x3c01}, // Just past the tie.
		{0x1p-24, 0x0001},               // Smallest subnormal.
		{0x1p-25, 0x0000},               // Tie with zero: even is zero.
		{1.5 * 0x1p-25, 0x0001},
		{3 * 0x1p-25, 0x0002},       // Tie between subnormals 1 and 2.
		{0x1p-14 - 0x1p-25, 0x0400}, // Rounds up out of the subnormals.
		{math.Copysign(0, -1), 0x8000},
	}
	for _, c := range cases {
		if got := Float32ToFloat16(float32(c.value)); got != c.bits {
			t.Errorf("Float32ToFloat16(%g) = %#04x, want %#04x", c.value, got, c.bits)
		}
	}
	if got := Float32ToFloat16(float32(math.NaN())); got&0x7e00 != 0x7e00 {
		t.Errorf("Float32ToFloat16(NaN) = %#04x, not a quiet NaN", got)
	}
	if Float16ToFloat32(0x0001) != 0x1p-24 || Float16ToFloat32(0x7bff) != 65504 {
		t.Error("Float16ToFloat32 of the smallest subnormal or largest finite is wrong")
	}
}

func TestBfloat16RoundsToNearestEven(t *testing.T) {
	cases := []struct {
		value float32
		bits  uint16
	}{
		{1, 0x3f80}, {-1, 0xbf80},
		{1 + 0x1p-8, 0x3f80},   // Tie, even below.
		{1 + 3*0x1p-8, 0x3f82}, // Tie, even above.
		{1 + 0x1p-8 + 0x1p-20, 0x3f81},
		{3.3895313892515355e38, 0x7f7f}, // Largest finite bfloat16.
		{math.MaxFloat32, 0x7f80},       // Rounds to Inf.
		{float32(math.Inf(1)), 0x7f80},
	}
	for _, c := range cases {
		if got := Float32ToBfloat16(c.value); got != c.bits {
			t.Errorf("Float32ToBfloat16(%g) = %#04x, want %#04x", c.value, got, c.bits)
		}
	}
	if v := Bfloat16ToFloat32(Float32ToBfloat16(float32(math.NaN()))); !math.IsNaN(float64(v)) {
		t.Errorf("bfloat16 NaN came back as %g", v)
	}
}

func TestEvery16BitPatternSurvivesUnpackThenPack(t *testing.T) {
	for bits := 0; bits < 0x10000; bits++ {
		h := uint16(bits)
		if v := Float16ToFloat32(h); !math.IsNaN(float64(v)) && Float32ToFloat16(v) != h {
			t.Fatalf("float16 %#04x -> %g -> %#04x", h, v, Float32ToFloat16(v))
		}
		if v := Bfloat16ToFloat32(h); !math.IsNaN(float64(v)) && Float32ToBfloat16(v) != h {
			t.Fatalf("bfloat16 %#04x -> %g -> %#04x", h, v, Float32ToBfloat16(v))
		}
	}
}

func TestTensorRoundTrip(t *testing.T) {
	values := []float32{0.5, -1.25, 3, 1024, -0.0078125, 7} // Exact in every dtype.
	for _, dtype := range []pb.DataType{pb.DataType_FLOAT32, pb.DataType_BFLOAT16, pb.DataType_FLOAT16} {
		tensor := MustTensor(values, []int64{2, 3}, dtype)
		got, err := Values(tensor)
		if err != nil {
			t.Fatal(err)
		}
		for i := range values {
			if got[i] != values[i] {
				t.Errorf("%v: element %d = %g, want %g", dtype, i, got[i], values[i])
			}
		}
	}
	// Little-endian on the wire: 1.0f is 00 00 80 3f.
	if data := MustTensor([]float32{1}, []int64{1}, pb.DataType_FLOAT32).Data; string(data) != "\x00\x00\x80\x3f" {
		t.Errorf("1.0 packs as % x", data)
	}
	if _, err := NewTensor([]float32{1, 2}, []int64{3}, pb.DataType_FLOAT32); err == nil ||
		!strings.Contains(err.Error(), "needs 3 values, got 2") {
		t.Errorf("NewTensor with too few values: %v", err)
	}
	short := &pb.Tensor{Shape: []int64{2}, Dtype: pb.DataType_FLOAT32, Data: make([]byte, 4)}
	if _, err := Values(short); err == nil || !strings.Contains(err.Error(), "needs 8 bytes, got 4") {
		t.Errorf("Values of a short tensor: %v", err)
	}
}
