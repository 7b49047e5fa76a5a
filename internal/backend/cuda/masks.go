package cuda

// The vocabulary masks of a step's logits rows (package backend's layout: bit t%32 of word
// t/32 allows token t, a nil mask allows every token), laid out in one buffer for the
// argmax and sampling kernels.

// noMask is the offset word of a row without a mask (0xffffffff in sample.cu).
const noMask = -1

// MaskedLen returns the words of the masks buffer of checked masks over vocab tokens
// ((vocab+31)/32 words a mask, as backend.MaskWords): 0 when no row has a mask.
func MaskedLen(masks [][]uint32, vocab int) int {
	masked := 0
	for _, m := range masks {
		if m != nil {
			masked++
		}
	}
	if masked == 0 {
		return 0
	}
	return len(masks) + masked*((vocab+31)/32)
}

// PackMasks lays checked masks out in dst (MaskedLen words) as the kernels read them: one
// offset word per row, noMask for a row without a mask, then the masks of the masked rows
// in row order.
func PackMasks(dst []int32, masks [][]uint32) {
	off := len(masks)
	for i, m := range masks {
		if m == nil {
			dst[i] = noMask
			continue
		}
		dst[i] = int32(off)
		for j, w := range m {
			dst[off+j] = int32(w)
		}
		off += len(m)
	}
}
