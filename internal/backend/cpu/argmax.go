package cpu

import "fmt"

// Argmax returns the index of the largest value of x (the first on ties), or -1 for an
// empty slice. NaNs are never chosen unless all values are NaN (then 0).
func Argmax(x []float32) int {
	if len(x) == 0 {
		return -1
	}
	best := 0
	for i, v := range x {
		if v > x[best] || (x[best] != x[best] && v == v) {
			best = i
		}
	}
	return best
}

// ArgmaxMasked is Argmax among the tokens mask allows: the lowest index among ties, and a
// NaN never wins. It returns 0 when no allowed token has a value other than NaN (a mask
// that allows nothing, say), and -1 for an empty x.
//
// mask is nil (every token allowed: Argmax itself) or a vocabulary mask: bit t%32 of word
// t/32 set allows token t; tokens past the end of a short mask are not allowed.
func ArgmaxMasked(x []float32, mask []uint32) int {
	if mask == nil || len(x) == 0 {
		return Argmax(x)
	}
	best := -1
	var top float32
	for w, bits := range mask {
		lo := w * 32
		if lo >= len(x) {
			break
		}
		if bits == 0 {
			continue
		}
		for i, v := range x[lo:min(lo+32, len(x))] {
			if bits>>i&1 != 0 && (v > top || (best < 0 && v == v)) {
				best, top = lo+i, v
			}
		}
	}
	return max(best, 0)
}

// ArgmaxRows writes ArgmaxMasked of each of the len(dst) rows of vocab logits into dst,
// rows in parallel on p. masks is nil or has one mask per row (a nil entry allows every
// token); a mask must have (vocab+31)/32 words.
func ArgmaxRows(p *Pool, dst []int32, logits []float32, vocab int, masks [][]uint32) error {
	rows := len(dst)
	if err := checkRows("argmax", vocab, rows, len(logits)); err != nil {
		return err
	}
	if masks != nil && len(masks) != rows {
		return fmt.Errorf("cpu: argmax: %d masks for %d rows", len(masks), rows)
	}
	words := (vocab + 31) / 32
	for i, m := range masks {
		if m != nil && len(m) != words {
			return fmt.Errorf("cpu: argmax: row %d: mask of %d words for %d tokens", i, len(m), vocab)
		}
	}
	runRows(p, rows, vocab, func(start, end int) {
		for r := start; r < end; r++ {
			var mask []uint32
			if masks != nil {
				mask = masks[r]
			}
			dst[r] = int32(ArgmaxMasked(logits[r*vocab:(r+1)*vocab], mask))
		}
	})
	return nil
}
