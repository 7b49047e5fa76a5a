package cuda

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// moeSortRef is the grouping MoESort must produce, by a stable counting sort in Go:
// order (the pair at each sorted row, -1 past the valid ones), pos (each pair's row, -1
// for an id outside [0, experts)), counts, and the chunks of at most nt rows (zeros past
// the last, maxChunks of them).
func moeSortRef(ids []int32, experts, nt, maxChunks int) (order, pos, chunks, counts []int32) {
	order, pos = slices.Repeat([]int32{-1}, len(ids)), slices.Repeat([]int32{-1}, len(ids))
	counts, chunks = make([]int32, experts), make([]int32, 3*maxChunks)
	r, c := 0, 0
	for e := range experts {
		start := r
		for p, id := range ids {
			if int(id) == e {
				order[r], pos[p] = int32(p), int32(r)
				r++
			}
		}
		counts[e] = int32(r - start)
		for s := start; s < r; s += nt {
			chunks[3*c], chunks[3*c+1], chunks[3*c+2] = int32(e), int32(s), int32(min(nt, r-s))
			c++
		}
	}
	return order, pos, chunks, counts
}

// TestMoESortGatherCombine checks the grouping of token-expert pairs by expert against
// the stable counting sort in Go (ids outside the experts included: they are left out),
// for 1 to 37 tokens, 8 experts top-2 and 60 top-4, chunks of 1 to 8 rows; then the
// gather of the sorted rows and the weighted combine against float64 sums.
func TestMoESortGatherCombine(t *testing.T) {
	e := newEnv(t)
	r := rand.New(rand.NewPCG(18, 1))
	for _, c := range []struct{ n, experts, k, nt int }{{1, 8, 2, 1}, {3, 8, 2, 4}, {37, 8, 2, 8}, {3, 60, 4, 2}, {37, 60, 4, 8}} {
		name := fmt.Sprintf("n=%d experts=%d k=%d nt=%d", c.n, c.experts, c.k, c.nt)
		pairs := c.n * c.k
		ids := make([]int32, pairs)
		for tok := range c.n {
			perm := r.Perm(c.experts)
			for j := range c.k {
				ids[tok*c.k+j] = int32(perm[j])
			}
		}
		ids[pairs/2] = int32(c.experts) // outside: left out
		maxChunks := MoEChunks(pairs, c.experts, c.nt)
		g := MoEGroups{Order: e.poisoned(t, I32, pairs), Pos: e.poisoned(t, I32, pairs), Chunks: e.poisoned(t, I32, 3*maxChunks),
			Counts: e.poisoned(t, I32, c.experts), NT: c.nt, MaxChunks: maxChunks}
		idb := e.uploadI32(t, ids)
		const dim = 20
		xv := randVals(r, c.n*dim, 1)
		x, _ := e.upload(t, F32, xv)
		xs := e.poisoned(t, F32, pairs*dim)
		e.do(t, func() error {
			return firstErr(e.ops.MoESort(g, idb, pairs, c.experts), e.ops.MoEGather(xs, x, g, pairs, c.k, dim))
		})
		order, pos, chunks, counts := moeSortRef(ids, c.experts, c.nt, maxChunks)
		for _, v := range []struct {
			what      string
			got, want []int32
		}{{"order", e.downloadI32(t, g.Order), order}, {"pos", e.downloadI32(t, g.Pos), pos},
			{"chunks", e.downloadI32(t, g.Chunks), chunks}, {"counts", e.downloadI32(t, g.Counts), counts}} {
			if !slices.Equal(v.got, v.want) {
				t.Fatalf("%s: %s %v, want %v", name, v.what, v.got, v.want)
			}
		}
		gathered := e.download(t, xs)
		for row, p := range order {
			for i := range dim {
				want := float32(0)
				if p >= 0 {
					want = xv[int(p)/c.k*dim+i]
				}
				if gathered[row*dim+i] != want {
					t.Fatalf("%s: gathered row %d [%d] = %v, want %v", name, row, i, gathered[row*dim+i], want)
				}
			}
		}

		// The combine reads ys in sorted order: out[t] = sum_j gains[t][j] * ys[pos[t*k+j]].
		yv, gv := randVals(r, pairs*dim, 1), randVals(r, pairs, 1)
		ys, _ := e.upload(t, F32, yv)
		gains, _ := e.upload(t, F32, gv)
		out := e.poisoned(t, F32, c.n*dim)
		e.do(t, func() error { return e.ops.MoECombine(out, ys, gains, g, c.n, c.k, dim) })
		want := make([]float64, c.n*dim)
		for tok := range c.n {
			for j := range c.k {
				row := pos[tok*c.k+j]
				if row < 0 {
					continue
				}
				for i := range dim {
					want[tok*dim+i] += float64(gv[tok*c.k+j]) * float64(yv[int(row)*dim+i])
				}
			}
		}
		check(t, name+" combine", F32, e.download(t, out), want)
	}
}
