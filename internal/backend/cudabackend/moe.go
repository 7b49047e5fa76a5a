package cudabackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

// Mixture of experts on the device. RouteExperts picks every token's experts with one
// kernel; ExpertMLP sorts the token-expert pairs by expert on the device (cuda.MoESort),
// gathers their rows in that order and runs the experts over them in one of two ways:
//
//   - grouped: one GEMV launch a projection over all experts, each block finding its
//     expert's weights through a device table of addresses (cuda.MoEGEMV). Nothing comes
//     back to the host, so a step stays capturable as a graph. Used for steps of at most
//     cuda.GEMVMaxRows tokens and for every step of a graph shape, when the experts are
//     F32, 16-bit (rows a multiple of 8) or of a GGML block type.
//   - looped: the per-expert counts are read back (one host synchronisation a slice of
//     tokens) and each expert with rows runs through the dense MatMul (cuBLAS for 16-bit
//     weights, dequantized chunks for block types): prefill, where each expert gets many
//     rows and the GEMMs pay. Experts the grouped kernels do not read (16-bit of rows
//     not a multiple of 8, or types mixed across experts) always run so, eagerly: a step
//     with them is not captured as a graph.
//
// The weighted sum over each token's experts is then one kernel (cuda.MoECombine).

// moePairs is the most token-expert pairs ExpertMLP runs at once: a longer step runs in
// slices of moePairs/k tokens, which bounds its scratch (Mixtral's 14336-wide experts: 117
// MiB of F32 hidden rows).
const moePairs = 1024

// moeState is the backend's scratch for ExpertMLP and the expert tables of the models'
// layers.
type moeState struct {
	order, pos, chunks, counts cuda.Buffer // I32 (cuda.MoEGroups)
	xs, h, hu, ys              cuda.Buffer // F32 sorted rows: inputs, hidden (gate), up, outputs
	tables                     map[*tensor]*expertTable
}

// expertTable is one layer's experts as the grouped kernels see them: a device table of
// their matrices' addresses (gate, up, down an expert) and the checked shapes and types.
type expertTable struct {
	buf     cuda.Buffer // I32, two words an address
	addrs   []uint64    // the addresses it holds, to tell a stale table
	ffn     int         // rows of gate and up, columns of down
	dt      [3]cuda.DType
	grouped bool // every matrix of one kind shares a type the grouped kernels read
}

// RouteExperts picks each token's top experts by softmax probability on the device.
func (b *Backend) RouteExperts(ids, gains, logits backend.Tensor, normalize bool) error {
	const op = "route experts"
	id, err := devTensor(op, "ids", ids, cuda.I32)
	if err != nil {
		return err
	}
	g, err := devTensor(op, "gains", gains, cuda.F32)
	if err != nil {
		return err
	}
	lg, err := devTensor(op, "logits", logits, cuda.F32)
	if err != nil {
		return err
	}
	n, k, experts := lg.rows(), id.cols(), lg.cols()
	if id.rows() != n || g.rows() != n || g.cols() != k || k > experts {
		return fmt.Errorf("cuda route experts: ids %v and gains %v for logits %v", id.shape, g.shape, lg.shape)
	}
	return b.ops.MoERoute(id.buf, g.buf, lg.buf, n, experts, k, normalize)
}

// ExpertMLP writes out[t] = sum over j of gains[t][j] * experts[ids[t][j]](x[t]). An id
// outside the experts adds nothing (the ids are the device's own, from RouteExperts, and
// are not read back to be checked).
func (b *Backend) ExpertMLP(out, x, ids, gains backend.Tensor, experts []backend.Expert) error {
	const op = "expert mlp"
	o, err := devTensor(op, "out", out, cuda.F32)
	if err != nil {
		return err
	}
	xs, err := devTensor(op, "x", x, cuda.F32)
	if err != nil {
		return err
	}
	id, err := devTensor(op, "ids", ids, cuda.I32)
	if err != nil {
		return err
	}
	g, err := devTensor(op, "gains", gains, cuda.F32)
	if err != nil {
		return err
	}
	if err := sameShape(op, o, xs); err != nil {
		return err
	}
	n, dim, k := xs.rows(), xs.cols(), id.cols()
	if id.rows() != n || g.rows() != n || g.cols() != k {
		return fmt.Errorf("cuda expert mlp: ids %v and gains %v for %d tokens", id.shape, g.shape, n)
	}
	tab, err := b.expertTable(experts, dim)
	if err != nil {
		return err
	}
	grouped := tab.grouped && (n <= cuda.GEMVMaxRows || b.capturing || (b.cur != nil && b.cur.graphable))
	if b.capturing && !grouped {
		return fmt.Errorf("cuda expert mlp: experts of mixed types or of rows the grouped kernels do not take (expert 0: %s/%s/%s) read their counts on the host, which a graph capture cannot",
			tab.dt[0], tab.dt[1], tab.dt[2])
	}
	slice := max(1, moePairs/k)
	for t0 := 0; t0 < n; t0 += slice {
		m := min(n, t0+slice) - t0
		xr, err1 := xs.buf.Slice(t0*dim, (t0+m)*dim)
		ov, err2 := o.buf.Slice(t0*dim, (t0+m)*dim)
		ir, err3 := id.buf.Slice(t0*k, (t0+m)*k)
		gr, err4 := g.buf.Slice(t0*k, (t0+m)*k)
		if err := firstErr(err1, err2, err3, err4); err != nil {
			return err
		}
		if err := b.expertRows(ov, xr, ir, gr, experts, tab, m, dim, k, grouped); err != nil {
			return err
		}
	}
	return nil
}

// expertRows is ExpertMLP over m tokens (inside Run).
func (b *Backend) expertRows(out, x, ids, gains cuda.Buffer, experts []backend.Expert, tab *expertTable, m, dim, k int, grouped bool) error {
	pairs, f, ne := m*k, tab.ffn, len(experts)
	nt := min(m, cuda.GEMVMaxRows)
	for _, bucket := range []int{1, 2, 4, 8} {
		if nt <= bucket {
			nt = bucket
			break
		}
	}
	grp, err := b.moeScratch(pairs, dim, f, ne, nt)
	if err != nil {
		return err
	}
	s := &b.moe
	xsr := cuda.Buffer{Ptr: s.xs.Ptr, DType: cuda.F32, Len: pairs * dim}
	h := cuda.Buffer{Ptr: s.h.Ptr, DType: cuda.F32, Len: pairs * f}
	hu := cuda.Buffer{Ptr: s.hu.Ptr, DType: cuda.F32, Len: pairs * f}
	ys := cuda.Buffer{Ptr: s.ys.Ptr, DType: cuda.F32, Len: pairs * dim}
	if err := firstErr(b.ops.MoESort(grp, ids, pairs, ne), b.ops.MoEGather(xsr, x, grp, pairs, k, dim)); err != nil {
		return err
	}
	if grouped {
		if tab.dt[0] == tab.dt[1] && sixteenBit(tab.dt[0]) {
			err = b.ops.MoEGEMVSwiGLU(h, xsr, tab.buf, tab.dt[0], grp, pairs, dim, f)
		} else {
			err = firstErr(b.ops.MoEGEMV(h, xsr, tab.buf, cuda.ExpertGate, tab.dt[0], grp, pairs, dim, f),
				b.ops.MoEGEMV(hu, xsr, tab.buf, cuda.ExpertUp, tab.dt[1], grp, pairs, dim, f),
				b.ops.SwiGLU(h, h, hu, pairs, f, f))
		}
		if err == nil {
			err = b.ops.MoEGEMV(ys, h, tab.buf, cuda.ExpertDown, tab.dt[2], grp, pairs, f, dim)
		}
	} else {
		err = b.expertsLooped(xsr, h, hu, ys, grp, experts, pairs, dim, f)
	}
	if err != nil {
		return fmt.Errorf("cuda expert mlp: %w", err)
	}
	return b.ops.MoECombine(out, ys, gains, grp, m, k, dim)
}

// expertsLooped runs each expert with rows through the dense MatMul over its sorted rows:
// the per-expert counts are read back first (a host synchronisation).
func (b *Backend) expertsLooped(xs, h, hu, ys cuda.Buffer, grp cuda.MoEGroups, experts []backend.Expert, pairs, dim, f int) error {
	counts := make([]int32, len(experts))
	if err := cuda.Download(b.dev, counts, cuda.Buffer{Ptr: grp.Counts.Ptr, DType: cuda.I32, Len: len(experts)}); err != nil {
		return err
	}
	rows := func(buf cuda.Buffer, r0, r1, cols int) cuda.Buffer {
		return cuda.Buffer{Ptr: buf.Ptr + uint64(4*r0*cols), DType: cuda.F32, Len: (r1 - r0) * cols}
	}
	for pass := range 2 {
		off := 0
		for e, c := range counts {
			r0, r1 := off, off+int(c)
			off = r1
			if c == 0 {
				continue
			}
			ex := experts[e]
			var err error
			if pass == 0 {
				err = firstErr(b.matMul(rows(h, r0, r1, f), rows(xs, r0, r1, dim), ex.Gate.(*tensor), int(c)),
					b.matMul(rows(hu, r0, r1, f), rows(xs, r0, r1, dim), ex.Up.(*tensor), int(c)))
			} else {
				err = b.matMul(rows(ys, r0, r1, dim), rows(h, r0, r1, f), ex.Down.(*tensor), int(c))
			}
			if err != nil {
				return fmt.Errorf("expert %d: %w", e, err)
			}
		}
		if pass == 0 {
			if err := b.ops.SwiGLU(h, h, hu, pairs, f, f); err != nil {
				return err
			}
		}
	}
	return nil
}

// moeScratch makes the MoE scratch hold pairs pairs of rows of dim and f values for ne
// experts, and returns the groups' views for chunks of nt rows (inside Run; growing fails
// during a graph capture, which the step's eager first run makes unnecessary).
func (b *Backend) moeScratch(pairs, dim, f, ne, nt int) (cuda.MoEGroups, error) {
	s := &b.moe
	chunks := cuda.MoEChunks(pairs, ne, nt)
	for _, r := range []struct {
		buf  *cuda.Buffer
		dt   cuda.DType
		n    int
		what string
	}{
		{&s.order, cuda.I32, pairs, "moe order"}, {&s.pos, cuda.I32, pairs, "moe positions"},
		{&s.chunks, cuda.I32, 3 * cuda.MoEChunks(pairs, ne, 1), "moe chunks"}, {&s.counts, cuda.I32, ne, "moe counts"},
		{&s.xs, cuda.F32, pairs * dim, "moe rows"}, {&s.ys, cuda.F32, pairs * dim, "moe outputs"},
		{&s.h, cuda.F32, pairs * f, "moe hidden rows"}, {&s.hu, cuda.F32, pairs * f, "moe up rows"},
	} {
		if err := b.grow(r.buf, r.dt, r.n, r.n, r.what); err != nil {
			return cuda.MoEGroups{}, err
		}
	}
	view := func(buf cuda.Buffer, n int) cuda.Buffer { return cuda.Buffer{Ptr: buf.Ptr, DType: cuda.I32, Len: n} }
	return cuda.MoEGroups{Order: view(s.order, pairs), Pos: view(s.pos, pairs), Chunks: view(s.chunks, 3*chunks),
		Counts: view(s.counts, ne), NT: nt, MaxChunks: chunks}, nil
}

// expertTable returns the device table of a layer's experts, checked against the model
// width dim, building (or rebuilding, when a matrix moved) it on first use (inside Run;
// building fails during a graph capture, which the step's eager first run makes
// unnecessary).
func (b *Backend) expertTable(experts []backend.Expert, dim int) (*expertTable, error) {
	if len(experts) == 0 || len(experts) > cuda.MoEMaxExperts {
		return nil, fmt.Errorf("cuda expert mlp: %d experts (want 1 to %d)", len(experts), cuda.MoEMaxExperts)
	}
	mats := make([]*tensor, 0, 3*len(experts))
	for e, ex := range experts {
		for _, w := range []backend.Tensor{ex.Gate, ex.Up, ex.Down} {
			t, err := devTensor("expert mlp", fmt.Sprintf("expert %d weight", e), w, weightTypes...)
			if err != nil {
				return nil, err
			}
			mats = append(mats, t)
		}
	}
	if tab := b.moe.tables[mats[0]]; tab != nil && tab.current(mats) {
		return tab, nil
	}
	tab := &expertTable{ffn: mats[0].rows(), dt: [3]cuda.DType{mats[0].buf.DType, mats[1].buf.DType, mats[2].buf.DType}, grouped: true}
	f := tab.ffn
	for i, t := range mats {
		e, which := i/3, i%3
		want := [3][2]int{{f, dim}, {f, dim}, {dim, f}}[which]
		if len(t.shape) != 2 || t.rows() != want[0] || t.cols() != want[1] {
			return nil, fmt.Errorf("cuda expert mlp: expert %d: %s %v, want %v (width %d, expert size %d)", e,
				[]string{"gate", "up", "down"}[which], t.shape, want, dim, f)
		}
		if t.buf.DType != tab.dt[which] {
			tab.grouped = false
		}
		tab.addrs = append(tab.addrs, t.buf.Ptr)
	}
	for which, dt := range tab.dt {
		k := []int{dim, dim, f}[which]
		if !cuda.Quantized(dt) && dt != cuda.F32 && !(sixteenBit(dt) && k%8 == 0) {
			tab.grouped = false
		}
	}
	if b.capturing {
		return nil, fmt.Errorf("cuda expert mlp: the expert table is built during a graph capture")
	}
	if old := b.moe.tables[mats[0]]; old != nil {
		delete(b.moe.tables, mats[0])
		if err := b.free(old.buf); err != nil {
			return nil, err
		}
	}
	buf, err := b.alloc(cuda.I32, 2*len(tab.addrs))
	if err != nil {
		return nil, fmt.Errorf("cuda expert mlp: expert table: %w", err)
	}
	tab.buf = buf
	if err := cuda.Upload(b.dev, buf, tab.addrs); err != nil {
		return nil, fmt.Errorf("cuda expert mlp: expert table: %w", err)
	}
	if b.moe.tables == nil {
		b.moe.tables = map[*tensor]*expertTable{}
	}
	b.moe.tables[mats[0]] = tab
	return tab, nil
}

// current reports whether the table still holds the addresses of mats.
func (t *expertTable) current(mats []*tensor) bool {
	if len(mats) != len(t.addrs) {
		return false
	}
	for i, m := range mats {
		if m.buf.Ptr != t.addrs[i] {
			return false
		}
	}
	return true
}

// forgetExperts frees the expert table keyed by t, a weight being freed (inside Run).
func (b *Backend) forgetExperts(t *tensor) error {
	tab := b.moe.tables[t]
	if tab == nil {
		return nil
	}
	delete(b.moe.tables, t)
	return b.free(tab.buf)
}

// GatedAdd adds sigmoid(x[t]·gate) * y[t] to out[t] on the device.
func (b *Backend) GatedAdd(out, y, x, gate backend.Tensor) error {
	const op = "gated add"
	o, err := devTensor(op, "out", out, cuda.F32)
	if err != nil {
		return err
	}
	ys, err := devTensor(op, "y", y, cuda.F32)
	if err != nil {
		return err
	}
	xs, err := devTensor(op, "x", x, cuda.F32)
	if err != nil {
		return err
	}
	gs, err := devTensor(op, "gate", gate, cuda.F32)
	if err != nil {
		return err
	}
	if err := sameShape(op, o, ys); err != nil {
		return err
	}
	if xs.rows() != o.rows() || gs.buf.Len != xs.cols() {
		return fmt.Errorf("cuda gated add: x %v and gate of %d for out %v", xs.shape, gs.buf.Len, o.shape)
	}
	return b.ops.GatedAdd(o.buf, ys.buf, xs.buf, gs.buf, o.rows(), o.cols(), xs.cols())
}

// RouteExpertsBiased picks each token's experts as DeepSeek-V3 does (see
// backend.BiasedRouter).
func (b *Backend) RouteExpertsBiased(ids, gains, logits, bias backend.Tensor, groups, groupsUsed int, normalize bool) error {
	const op = "route experts biased"
	id, err := devTensor(op, "ids", ids, cuda.I32)
	if err != nil {
		return err
	}
	g, err := devTensor(op, "gains", gains, cuda.F32)
	if err != nil {
		return err
	}
	lg, err := devTensor(op, "logits", logits, cuda.F32)
	if err != nil {
		return err
	}
	n, k, experts := lg.rows(), id.cols(), lg.cols()
	if id.rows() != n || g.rows() != n || g.cols() != k || k > experts {
		return fmt.Errorf("cuda %s: ids %v and gains %v for logits %v", op, id.shape, g.shape, lg.shape)
	}
	var bb cuda.Buffer
	if bias != nil {
		bt, err := devTensor(op, "bias", bias, cuda.F32)
		if err != nil {
			return err
		}
		bb = bt.buf
	}
	return b.ops.MoERouteBiased(id.buf, g.buf, lg.buf, bb, bias != nil, n, experts, k, groups, groupsUsed, normalize)
}
