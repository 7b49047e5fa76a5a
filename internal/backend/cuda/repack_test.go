package cuda

import (
	"math/rand/v2"
	"testing"
)

// TestRepack checks the repacked layouts byte by byte against GGML's: every block's scale
// and quants where kernels/gemvq.cuh's q8_0r and q6_kr read them, and the refusals.
func TestRepack(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		from, to   DType
		rows, cols int
		// parts are each field of a GGML block (offset, length) and where block j of a
		// super-block puts it: at base + j*stride.
		parts [][4]int
	}{
		{Q8_0, Q8_0R, 3, 512, [][4]int{{0, 2, 0, 2}, {2, 32, 16, 32}}},
		{Q6_K, Q6_KR, 2, 4096, [][4]int{{0, 128, 0, 128}, {128, 64, 1024, 64}, {192, 16, 1536, 16}, {208, 2, 1664, 2}}},
	} {
		elems, nb, _ := c.from.Block()
		raw := make([]byte, c.rows*c.cols/elems*nb)
		for i := range raw {
			raw[i] = byte(r.Uint32())
		}
		if got := Repacked(c.from, c.cols); got != c.to {
			t.Fatalf("Repacked(%s, %d) = %s, want %s", c.from, c.cols, got, c.to)
		}
		out, err := Repack(c.to, c.from, raw, c.rows, c.cols)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != len(raw) {
			t.Fatalf("%s: %d bytes repacked to %d", c.to, len(raw), len(out))
		}
		for blk := 0; blk < len(raw)/nb; blk++ {
			super, j := blk/8*8*nb, blk%8
			for _, p := range c.parts {
				for i := 0; i < p[1]; i++ {
					if a, b := raw[blk*nb+p[0]+i], out[super+p[2]+j*p[3]+i]; a != b {
						t.Fatalf("%s block %d: byte %d of the field at %d moved wrong (%d, want %d)", c.to, blk, i, p[0], b, a)
					}
				}
			}
		}
		if _, err := Repack(c.to, c.from, raw[:len(raw)-1], c.rows, c.cols); err == nil {
			t.Errorf("%s: a short input was repacked", c.to)
		}
		if _, err := Repack(c.to, c.from, raw, c.rows*2, c.cols/2+elems); err == nil {
			t.Errorf("%s: rows that are not whole super-blocks were repacked", c.to)
		}
	}
	if Repacked(Q8_0, 2304+32) != Q8_0 || Repacked(Q6_K, 4096+256) != Q6_K || Repacked(Q4_K, 4096) != Q4_K {
		t.Error("a weight whose rows are not whole super-blocks (or of another type) is repacked")
	}
	raw := []byte{1, 2}
	if got, err := Repack(Q4_K, Q4_K, raw, 1, 256); err != nil || &got[0] != &raw[0] {
		t.Errorf("Repack to the same type: %v, or a copy", err)
	}
}
