package cuda

import (
	"encoding/binary"
	"math/bits"
)

// Is2of4 reports whether a row-major matrix of 16-bit floats (F16 or BF16, little-endian
// bytes) with rows of cols values is 2:4 sparse along its rows: cols a multiple of 4 and
// at least two of every four consecutive values of a row zero (+0 or -0). negZero reports
// whether a zero is a -0, which cuSPARSELt's compression may take for a value
// (ZeroNegatives rewrites them). It stops at the first group of more than two values.
func Is2of4(data []byte, cols int) (ok, negZero bool) {
	if cols <= 0 || cols%4 != 0 || len(data) == 0 || len(data)%(2*cols) != 0 {
		return false, false
	}
	// A group of four values is one little-endian 64-bit word of four 16-bit lanes: a
	// lane's magnitude bits plus 0x7fff carry into its bit 15 exactly when they are not
	// all zero (no carry leaves the lane), which counts the group's values at once.
	const mag, top = 0x7fff7fff7fff7fff, 0x8000800080008000
	for i := 0; i < len(data); i += 8 {
		w := binary.LittleEndian.Uint64(data[i:])
		nonzero := ((w & mag) + mag) & top
		if w&top&^nonzero != 0 {
			negZero = true
		}
		if bits.OnesCount64(nonzero) > 2 {
			return false, negZero
		}
	}
	return true, negZero
}

// ZeroNegatives returns a copy of data (16-bit floats, little-endian) with every -0 made +0.
func ZeroNegatives(data []byte) []byte {
	out := make([]byte, len(data))
	for i := 0; i+1 < len(data); i += 2 {
		if data[i] != 0 || data[i+1] != 0x80 {
			out[i], out[i+1] = data[i], data[i+1]
		}
	}
	return out
}
