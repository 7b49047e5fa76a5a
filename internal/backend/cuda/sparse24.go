package cuda

// Is2of4 reports whether a row-major matrix of 16-bit floats (F16 or BF16, little-endian
// bytes) with rows of cols values is 2:4 sparse along its rows: cols a multiple of 4 and
// at least two of every four consecutive values of a row zero (+0 or -0). negZero reports
// whether a zero is a -0, which cuSPARSELt's compression may take for a value
// (ZeroNegatives rewrites them). It stops at the first group of more than two values.
func Is2of4(data []byte, cols int) (ok, negZero bool) {
	if cols <= 0 || cols%4 != 0 || len(data) == 0 || len(data)%(2*cols) != 0 {
		return false, false
	}
	for i := 0; i < len(data); i += 8 {
		nonzero := 0
		for j := i; j < i+8; j += 2 {
			lo, hi := data[j], data[j+1]
			switch {
			case lo == 0 && hi == 0x80:
				negZero = true
			case lo != 0 || hi != 0:
				nonzero++
			}
		}
		if nonzero > 2 {
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
