package cuda

import "fmt"

// The launchers of the kernels in kernels/moe.cu: a mixture of experts' routing, the
// token-expert pairs grouped by expert, the grouped GEMVs over every expert in one launch,
// the weighted combine and the shared expert's gate. Nothing here reads device memory
// back: a step's routing stays on the device.

// MoEMaxExperts is the most experts MoESort takes (MOE_MAX_EXPERTS in moe.cu).
const MoEMaxExperts = 1024

// MoEChunks bounds the chunks MoESort cuts pairs token-expert pairs of experts experts
// into when no chunk holds more than nt rows: every expert's last chunk may be partial.
func MoEChunks(pairs, experts, nt int) int {
	return (pairs+nt-1)/nt + min(experts, pairs)
}

// MoERouteMaxK is the most experts MoERoute picks a token (a lane of a warp each).
const MoERouteMaxK = 32

// MoERoute picks each of n tokens' k (at most MoERouteMaxK) experts from its router logits
// (F32 [n][experts], at most MoEMaxExperts): the softmax in float64 (one warp a token),
// then the k most probable, best first, the lower index on ties,
// into ids (I32 [n][k]) with their probabilities into gains (F32 [n][k]), renormalized to
// sum to 1 over the chosen ones when normalize is set.
func (o *Ops) MoERoute(ids, gains, logits Buffer, n, experts, k int, normalize bool) error {
	if n <= 0 || experts <= 0 || experts > MoEMaxExperts || k <= 0 || k > min(experts, MoERouteMaxK) {
		return fmt.Errorf("cuda route experts: bad shape n=%d experts=%d k=%d (at most %d experts, %d a token)",
			n, experts, k, MoEMaxExperts, MoERouteMaxK)
	}
	if err := firstErr(need("route experts", "ids", ids, n*k, I32), need("route experts", "gains", gains, n*k, F32),
		need("route experts", "logits", logits, n*experts, F32)); err != nil {
		return err
	}
	norm := 0
	if normalize {
		norm = 1
	}
	return o.Dev.Launch(o.Kern.mod, "moe_route_f32", Dim3{(n + 3) / 4, 1, 1}, Dim3{128, 1, 1}, 0,
		ids, gains, logits, n, experts, k, norm)
}

// MoEGroups is the device bookkeeping of a step's token-expert pairs grouped by expert
// (MoESort fills it): Order (I32 [pairs]) the pair at each sorted row, Pos (I32 [pairs])
// each pair's sorted row, Chunks (I32 [3·MaxChunks]) the chunks of at most NT rows of one
// expert, Counts (I32 [experts]) each expert's pairs.
type MoEGroups struct {
	Order, Pos, Chunks, Counts Buffer
	// NT is the most rows of a chunk: the GEMV bucket (1, 2, 4 or 8) the grouped kernels
	// are launched with.
	NT int
	// MaxChunks is the chunk table's length, MoEChunks(pairs, experts, NT).
	MaxChunks int
}

// MoESort groups the pairs token-expert pairs of ids (I32, pair t·k+j token t's j-th
// expert) by expert into g, stably (token order within an expert): an id outside
// [0, experts) is left out (its Pos is -1 and it adds nothing to its token).
func (o *Ops) MoESort(g MoEGroups, ids Buffer, pairs, experts int) error {
	if pairs <= 0 || experts <= 0 || experts > MoEMaxExperts {
		return fmt.Errorf("cuda moe sort: bad shape pairs=%d experts=%d (at most %d)", pairs, experts, MoEMaxExperts)
	}
	if g.NT != 1 && g.NT != 2 && g.NT != 4 && g.NT != 8 {
		return fmt.Errorf("cuda moe sort: chunks of %d rows (want 1, 2, 4 or 8)", g.NT)
	}
	if g.MaxChunks != MoEChunks(pairs, experts, g.NT) {
		return fmt.Errorf("cuda moe sort: %d chunks for %d pairs of %d experts, want %d", g.MaxChunks, pairs, experts,
			MoEChunks(pairs, experts, g.NT))
	}
	if err := firstErr(need("moe sort", "ids", ids, pairs, I32), need("moe sort", "order", g.Order, pairs, I32),
		need("moe sort", "pos", g.Pos, pairs, I32), need("moe sort", "chunks", g.Chunks, 3*g.MaxChunks, I32),
		need("moe sort", "counts", g.Counts, experts, I32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "moe_sort", Dim3{1, 1, 1}, Dim3{1024, 1, 1}, 0,
		g.Order, g.Pos, g.Chunks, g.Counts, ids, pairs, experts, g.NT, g.MaxChunks)
}

// MoEGather writes row r of xs (F32 [pairs][dim]) from the row of x (F32 [pairs/k][dim])
// of the token of the pair at sorted row r (zeros for a row no valid pair fills).
func (o *Ops) MoEGather(xs, x Buffer, g MoEGroups, pairs, k, dim int) error {
	if pairs <= 0 || k <= 0 || pairs%k != 0 || dim <= 0 {
		return fmt.Errorf("cuda moe gather: bad shape pairs=%d k=%d dim=%d", pairs, k, dim)
	}
	if err := firstErr(need("moe gather", "xs", xs, pairs*dim, F32), need("moe gather", "x", x, pairs/k*dim, F32),
		need("moe gather", "order", g.Order, pairs, I32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "moe_gather_f32", Dim3{pairs, 1, 1}, Dim3{threads, 1, 1}, 0, xs, x, g.Order, k, dim)
}

// MoECombine writes out[t] = sum over j of gains[t][j] · ys[Pos[t·k+j]] for n tokens
// (out F32 [n][dim], ys F32 [n·k][dim] in sorted order, gains F32 [n][k]).
func (o *Ops) MoECombine(out, ys, gains Buffer, g MoEGroups, n, k, dim int) error {
	if n <= 0 || k <= 0 || dim <= 0 {
		return fmt.Errorf("cuda moe combine: bad shape n=%d k=%d dim=%d", n, k, dim)
	}
	if err := firstErr(need("moe combine", "out", out, n*dim, F32), need("moe combine", "ys", ys, n*k*dim, F32),
		need("moe combine", "gains", gains, n*k, F32), need("moe combine", "pos", g.Pos, n*k, I32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "moe_combine_f32", Dim3{n, 1, 1}, Dim3{threads, 1, 1}, 0, out, ys, g.Pos, gains, k, dim)
}

// Expert matrices in a MoE table: an expert's gate, up and down device addresses, in that
// order, three uint64 words an expert.
const (
	ExpertGate = iota
	ExpertUp
	ExpertDown
)

// MoEGEMV computes, for every chunk of g, y[rows] = xs[rows] · wᵀ with w matrix `which`
// (ExpertGate, ExpertUp or ExpertDown) of the chunk's expert, in one launch over all
// experts: table (I32, two words an address) holds each expert's three matrices, all of
// block, 16-bit or F32 type dt and m rows of k values. xs is F32 [pairs][k], y F32
// [pairs][m], both in sorted order. 16-bit weights need k to be a multiple of 8, block
// types whole blocks.
func (o *Ops) MoEGEMV(y, xs, table Buffer, which int, dt DType, g MoEGroups, pairs, k, m int) error {
	if which < ExpertGate || which > ExpertDown {
		return fmt.Errorf("cuda moe gemv: matrix %d", which)
	}
	name, rows, err := o.moeGEMVCheck("moe gemv", y, xs, table, dt, g, pairs, k, m)
	if err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, name, Dim3{(m + rows - 1) / rows, g.MaxChunks, 1}, Dim3{moeThreads(dt), 1, 1}, 0,
		y, xs, table, which, g.Chunks, k, m)
}

// MoEGEMVSwiGLU is MoEGEMV's gate and up in one launch for 16-bit experts:
// y[rows] = silu(xs[rows] · gateᵀ) * (xs[rows] · upᵀ), m the rows of each.
func (o *Ops) MoEGEMVSwiGLU(y, xs, table Buffer, dt DType, g MoEGroups, pairs, k, m int) error {
	if dt != F16 && dt != BF16 {
		return fmt.Errorf("cuda moe gemv swiglu: %s experts (want f16 or bf16)", dt)
	}
	name, _, err := o.moeGEMVCheck("moe gemv swiglu", y, xs, table, dt, g, pairs, k, m)
	if err != nil {
		return err
	}
	name, rows := gemvGLUKernel(g.NT, dt)
	return o.Dev.Launch(o.Kern.mod, "moe_"+name, Dim3{(m + rows - 1) / rows, g.MaxChunks, 1}, Dim3{gemvThreads, 1, 1}, 0,
		y, xs, table, 0, g.Chunks, k, m)
}

// moeGEMVCheck checks a grouped GEMV's operands and returns its plain kernel and the
// weight rows a block of it computes.
func (o *Ops) moeGEMVCheck(op string, y, xs, table Buffer, dt DType, g MoEGroups, pairs, k, m int) (string, int, error) {
	if pairs <= 0 || k <= 0 || m <= 0 || g.MaxChunks <= 0 || g.MaxChunks > 65535 {
		return "", 0, fmt.Errorf("cuda %s: bad shape pairs=%d k=%d m=%d chunks=%d", op, pairs, k, m, g.MaxChunks)
	}
	var name string
	var rows int
	switch {
	case Quantized(dt):
		if err := quantShape(op, dt, k); err != nil {
			return "", 0, err
		}
		name, rows = "moe_"+gemvqKernel(g.NT, dt), GEMVQRows
	case dt == F16 || dt == BF16:
		if k%8 != 0 {
			return "", 0, fmt.Errorf("cuda %s: rows of %d 16-bit values (want a multiple of 8)", op, k)
		}
		name, rows = gemvKernel(g.NT, dt)
		name = "moe_" + name
	case dt == F32:
		name, rows = "moe_gemv_f32", gemvThreads/32
	default:
		return "", 0, fmt.Errorf("cuda %s: %s experts (want f32, f16, bf16 or a block type)", op, dt)
	}
	if err := firstErr(need(op, "y", y, pairs*m, F32), need(op, "xs", xs, pairs*k, F32), need(op, "table", table, 6, I32),
		need(op, "chunks", g.Chunks, 3*g.MaxChunks, I32)); err != nil {
		return "", 0, err
	}
	return name, rows, nil
}

// moeThreads is the block size of the grouped GEMV of weights of type dt: the dense GEMV's.
func moeThreads(dt DType) int {
	if Quantized(dt) {
		return 32 * GEMVQWarps
	}
	return gemvThreads
}

// GatedAdd adds sigmoid(x[t] · gate) · y[t] to out[t] for rows rows (out and y F32
// [rows][dim], x F32 [rows][xd], gate F32 [xd]).
func (o *Ops) GatedAdd(out, y, x, gate Buffer, rows, dim, xd int) error {
	if rows <= 0 || dim <= 0 || xd <= 0 {
		return fmt.Errorf("cuda gated add: bad shape rows=%d dim=%d xd=%d", rows, dim, xd)
	}
	if err := firstErr(need("gated add", "out", out, rows*dim, F32), need("gated add", "y", y, rows*dim, F32),
		need("gated add", "x", x, rows*xd, F32), need("gated add", "gate", gate, xd, F32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "gated_add_f32", Dim3{rows, 1, 1}, Dim3{threads, 1, 1}, 0, out, y, x, gate, dim, xd)
}
