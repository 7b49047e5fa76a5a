package cuda

import "fmt"

// Repacked returns the device type a weight of block type dt with rows of cols values is
// kept in: Q8_0R for Q8_0 and Q6_KR for Q6_K where the rows are whole super-blocks of
// theirs (256 and 2048 values, true of the matrices of Llama-shaped models), so that the
// kernels load their quants 16 bytes at a time; dt itself otherwise.
func Repacked(dt DType, cols int) DType {
	switch {
	case dt == Q8_0 && cols%256 == 0:
		return Q8_0R
	case dt == Q6_K && cols%2048 == 0:
		return Q6_KR
	}
	return dt
}

// Unpacked returns the GGML block type a repacked type holds (Q8_0 for Q8_0R, Q6_K for
// Q6_KR), and any other type itself: the bytes are the same, only their order differs.
func Unpacked(dt DType) DType {
	switch dt {
	case Q8_0R:
		return Q8_0
	case Q6_KR:
		return Q6_K
	}
	return dt
}

// Repack rearranges rows of cols values of GGML blocks of type from (raw, as a GGUF file
// holds them) into the layout of to (Repacked(from, cols)): the same bytes, moved within
// each super-block of 8 blocks. For to == from it returns raw.
func Repack(to, from DType, raw []byte, rows, cols int) ([]byte, error) {
	if to == from {
		return raw, nil
	}
	if Repacked(from, cols) != to {
		return nil, fmt.Errorf("cuda repack: %s rows of %d values do not repack to %s", from, cols, to)
	}
	elems, nbytes, _ := from.Block()
	if len(raw) != rows*cols/elems*nbytes {
		return nil, fmt.Errorf("cuda repack: %d bytes for %d rows of %d %s values, want %d", len(raw), rows, cols, from, rows*cols/elems*nbytes)
	}
	out := make([]byte, len(raw))
	const blocks = 8 // GGML blocks a super-block
	super := blocks * nbytes
	for s := 0; s < len(raw); s += super {
		src, dst := raw[s:s+super], out[s:s+super]
		for j := 0; j < blocks; j++ {
			b := src[j*nbytes : (j+1)*nbytes]
			switch from {
			case Q8_0: // {f16 d; i8 qs[32]}
				copy(dst[2*j:], b[:2])
				copy(dst[16+32*j:], b[2:34])
			case Q6_K: // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}
				copy(dst[128*j:], b[:128])
				copy(dst[1024+64*j:], b[128:192])
				copy(dst[1536+16*j:], b[192:208])
				copy(dst[1664+2*j:], b[208:210])
			}
		}
	}
	return out, nil
}
