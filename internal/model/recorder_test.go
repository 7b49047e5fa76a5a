package model

import (
	"fmt"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// recorder is a backend that runs every call on the CPU backend and writes it down, one
// list of calls per Run, its tensors named by the buffer they are (views of): a record of
// what a device backend would capture as a graph. Calls made outside Run are noted as
// violations.
type recorder struct {
	cpu        *cpubackend.Backend
	runs       [][]string // the calls of each Run
	inRun      bool
	violations []string
	tensors    int // tensors made so far, to name the next one
}

// recTensor is a tensor of the recorder: the CPU tensor and its name ("w3" for an
// uploaded weight, "a5" for an activation, "a5[:7]" for a view of its first 7 rows).
type recTensor struct {
	backend.Tensor
	name string
}

// Rows returns a named view.
func (t *recTensor) Rows(n int) backend.Tensor {
	base, _, _ := strings.Cut(t.name, "[")
	return &recTensor{Tensor: t.Tensor.Rows(n), name: fmt.Sprintf("%s[:%d]", base, n)}
}

func newRecorder() *recorder { return &recorder{cpu: cpubackend.New(2)} }

// note writes a call down.
func (r *recorder) note(op string, args ...any) {
	parts := make([]string, len(args))
	for i, a := range args {
		switch a := a.(type) {
		case *recTensor:
			parts[i] = a.name
		case nil:
			parts[i] = "nil"
		default:
			parts[i] = fmt.Sprint(a)
		}
	}
	call := op + "(" + strings.Join(parts, ", ") + ")"
	if !r.inRun {
		r.violations = append(r.violations, call+" outside Run")
		return
	}
	r.runs[len(r.runs)-1] = append(r.runs[len(r.runs)-1], call)
}

// in returns the CPU tensor of a recorder tensor.
func in(t backend.Tensor) backend.Tensor {
	if rt, ok := t.(*recTensor); ok {
		return rt.Tensor
	}
	return t
}

// named wraps a new CPU tensor.
func (r *recorder) named(t backend.Tensor, err error, prefix string) (backend.Tensor, error) {
	if err != nil {
		return nil, err
	}
	r.tensors++
	return &recTensor{Tensor: t, name: fmt.Sprintf("%s%d", prefix, r.tensors)}, nil
}

func (r *recorder) Name() string { return "recorder over " + r.cpu.Name() }

func (r *recorder) Run(fn func() error) error {
	return r.cpu.Run(func() error {
		r.inRun = true
		defer func() { r.inRun = false }()
		r.runs = append(r.runs, nil)
		return fn()
	})
}

func (r *recorder) Close() error { return r.cpu.Close() }

func (r *recorder) UploadWeight(t *format.Tensor) (backend.Tensor, error) {
	r.note("UploadWeight", t.Name)
	w, err := r.cpu.UploadWeight(t)
	return r.named(w, err, "w")
}

func (r *recorder) NewTensor(dtype quant.Type, shape ...int) (backend.Tensor, error) {
	r.note("NewTensor", dtype, shape)
	t, err := r.cpu.NewTensor(dtype, shape...)
	return r.named(t, err, "a")
}

func (r *recorder) Free(t backend.Tensor) error {
	r.note("Free", t)
	return r.cpu.Free(in(t))
}

func (r *recorder) NewKVCache(spec backend.KVSpec) (backend.KVCache, error) {
	r.note("NewKVCache", spec)
	return r.cpu.NewKVCache(spec)
}

func (r *recorder) UploadStep(meta *backend.StepMeta) (backend.Step, error) {
	r.note("UploadStep")
	return r.cpu.UploadStep(meta)
}

func (r *recorder) Embedding(out, table backend.Tensor, st backend.Step) error {
	r.note("Embedding", out, table)
	return r.cpu.Embedding(in(out), in(table), st)
}

func (r *recorder) RMSNorm(out, x, weight backend.Tensor, eps float32) error {
	r.note("RMSNorm", out, x, weight)
	return r.cpu.RMSNorm(in(out), in(x), in(weight), eps)
}

func (r *recorder) RMSNormResidual(out, residual, x, weight backend.Tensor, eps float32) error {
	r.note("RMSNormResidual", out, residual, x, weight)
	return r.cpu.RMSNormResidual(in(out), in(residual), in(x), in(weight), eps)
}

func (r *recorder) HeadNorm(x, weight backend.Tensor, eps float32) error {
	r.note("HeadNorm", x, weight)
	return r.cpu.HeadNorm(in(x), in(weight), eps)
}

func (r *recorder) MatMul(out, x, w backend.Tensor) error {
	r.note("MatMul", out, x, w)
	return r.cpu.MatMul(in(out), in(x), in(w))
}

func (r *recorder) AddBias(x, bias backend.Tensor) error {
	r.note("AddBias", x, bias)
	return r.cpu.AddBias(in(x), in(bias))
}

func (r *recorder) RopeKVWrite(q, k, v backend.Tensor, rope backend.Rope, kv backend.KVCache, layer int, st backend.Step) error {
	r.note("RopeKVWrite", q, k, v, rope.InvFreq, layer)
	rope.InvFreq = in(rope.InvFreq)
	return r.cpu.RopeKVWrite(in(q), in(k), in(v), rope, kv, layer, st)
}

func (r *recorder) Attention(out, q backend.Tensor, kv backend.KVCache, layer int, scale float32, st backend.Step) error {
	r.note("Attention", out, q, layer)
	return r.cpu.Attention(in(out), in(q), kv, layer, scale, st)
}

func (r *recorder) AttentionWith(out, q backend.Tensor, kv backend.KVCache, layer int, opt backend.AttentionOptions, st backend.Step) error {
	r.note("AttentionWith", out, q, layer)
	return r.cpu.AttentionWith(in(out), in(q), kv, layer, opt, st)
}

func (r *recorder) GeGLU(out, gate, up backend.Tensor) error {
	r.note("GeGLU", out, gate, up)
	return r.cpu.GeGLU(in(out), in(gate), in(up))
}

func (r *recorder) Add(out, a, b backend.Tensor) error {
	r.note("Add", out, a, b)
	return r.cpu.Add(in(out), in(a), in(b))
}

func (r *recorder) SumSquares(out, x backend.Tensor) error {
	r.note("SumSquares", out, x)
	return r.cpu.SumSquares(in(out), in(x))
}

func (r *recorder) RMSNormSplit(x, sumSquares, weight backend.Tensor, n int, eps float32) error {
	r.note("RMSNormSplit", x, sumSquares, weight)
	return r.cpu.RMSNormSplit(in(x), in(sumSquares), in(weight), n, eps)
}

func (r *recorder) Scale(x backend.Tensor, s float32) error {
	r.note("Scale", x)
	return r.cpu.Scale(in(x), s)
}

func (r *recorder) SwiGLU(out, gate, up backend.Tensor) error {
	r.note("SwiGLU", out, gate, up)
	return r.cpu.SwiGLU(in(out), in(gate), in(up))
}

func (r *recorder) GatherRows(out, x backend.Tensor, st backend.Step) error {
	r.note("GatherRows", out, x)
	return r.cpu.GatherRows(in(out), in(x), st)
}

func (r *recorder) RouteExperts(ids, gains, logits backend.Tensor, normalize bool) error {
	r.note("RouteExperts", ids, gains, logits)
	return r.cpu.RouteExperts(in(ids), in(gains), in(logits), normalize)
}

func (r *recorder) RouteExpertsBiased(ids, gains, logits, bias backend.Tensor, groups, groupsUsed int, normalize bool) error {
	r.note("RouteExpertsBiased", ids, gains, logits, bias)
	var b backend.Tensor
	if bias != nil {
		b = in(bias)
	}
	return r.cpu.RouteExpertsBiased(in(ids), in(gains), in(logits), b, groups, groupsUsed, normalize)
}

func (r *recorder) ExpertMLP(out, x, ids, gains backend.Tensor, experts []backend.Expert) error {
	r.note("ExpertMLP", out, x, ids, gains)
	unwrapped := make([]backend.Expert, len(experts))
	for i, e := range experts {
		unwrapped[i] = backend.Expert{Gate: in(e.Gate), Up: in(e.Up), Down: in(e.Down)}
	}
	return r.cpu.ExpertMLP(in(out), in(x), in(ids), in(gains), unwrapped)
}

func (r *recorder) GatedAdd(out, y, x, gate backend.Tensor) error {
	r.note("GatedAdd", out, y, x, gate)
	return r.cpu.GatedAdd(in(out), in(y), in(x), in(gate))
}

func (r *recorder) Logits(dst []float32, x, w backend.Tensor) error {
	r.note("Logits", x, w)
	return r.cpu.Logits(dst, in(x), in(w))
}

func (r *recorder) CopyBlocks(kv backend.KVCache, copies []backend.BlockCopy) error {
	r.note("CopyBlocks", copies)
	return r.cpu.CopyBlocks(kv, copies)
}

func (r *recorder) ReadBlocks(kv backend.KVCache, blocks []int32, dst []byte) error {
	r.note("ReadBlocks", blocks)
	return r.cpu.ReadBlocks(kv, blocks, dst)
}

func (r *recorder) WriteBlocks(kv backend.KVCache, blocks []int32, src []byte) error {
	r.note("WriteBlocks", blocks)
	return r.cpu.WriteBlocks(kv, blocks, src)
}
