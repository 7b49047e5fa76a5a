package cudabackend

import (
	"fmt"
	"os"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

// maxGraphSeqs is the largest sequence bucket replayed as a graph; larger steps run
// eagerly.
const maxGraphSeqs = 256

// maxGraphQuery is the most tokens per sequence of a step replayed as a graph: a
// speculative verification of 1+16 tokens.
const maxGraphQuery = 17

// maxGraphTokens bounds the tokens of a graph step of more than one token per sequence,
// padding included.
const maxGraphTokens = 512

// minBlockStride is the smallest block-table stride of a graph step.
const minBlockStride = 16

// graphKey names one captured step graph: the buffers it uses (owner), its sequence
// count, its tokens per sequence and its block-table stride.
type graphKey struct {
	owner     any
	seqs      int
	query     int
	maxBlocks int
}

// graphEntry is the state of one graph key: how often its step ran eagerly, its graph once
// captured, and whether capturing failed (the step then always runs eagerly).
type graphEntry struct {
	seen   int
	graph  *cuda.Graph
	failed error
}

// GraphShape returns the shape a step of seqs sequences and tokens tokens, the longest of
// maxQuery, is padded to for graph replay (backend.StepGrapher): the sequences rounded up
// to a power of two, maxQuery tokens each (see graphShape).
func (b *Backend) GraphShape(seqs, tokens, maxQuery int) (bucket, queryLen int, ok bool) {
	return graphShape(seqs, tokens, maxQuery)
}

// graphShape is GraphShape: steps of up to maxGraphSeqs sequences of at most maxGraphQuery
// tokens each are replayed as graphs of bucket = the next power of two of sequences, of
// maxQuery tokens each. A step of more than one token per sequence is not padded past
// maxGraphTokens, nor to more than twice its tokens once past 128 (padding would cost more
// compute than replay saves), nor from at most cuda.GEMVMaxRows tokens to more: its
// matmuls keep the GEMV kernels, which read float32 activations and sum each row as a
// one-token step does, where cuBLAS would take them rounded to 16 bits.
func graphShape(seqs, tokens, maxQuery int) (bucket, queryLen int, ok bool) {
	if seqs <= 0 || seqs > maxGraphSeqs || tokens < seqs || maxQuery < 1 || maxQuery > maxGraphQuery {
		return seqs, maxQuery, false
	}
	bucket = 1
	for bucket < seqs {
		bucket <<= 1
	}
	padded := bucket * maxQuery
	if maxQuery > 1 && (padded > maxGraphTokens || padded > max(2*tokens, 128) ||
		(tokens <= cuda.GEMVMaxRows && padded > cuda.GEMVMaxRows)) {
		return seqs, maxQuery, false
	}
	return bucket, maxQuery, true
}

// graphQuery returns the tokens per sequence of a step laid out in a graph shape (every
// sequence of q tokens, every token a logits row, as many sequences and tokens as
// graphShape gives for such a step); ok is false for any other step.
func graphQuery(meta *backend.StepMeta) (q int, ok bool) {
	n, seqs := meta.NumTokens(), meta.NumSeqs()
	if seqs <= 0 || n%seqs != 0 || len(meta.LogitsIndices) != n {
		return 0, false
	}
	q = n / seqs
	for i, start := range meta.QueryStarts {
		if int(start) != i*q {
			return 0, false
		}
	}
	bucket, bq, ok := graphShape(seqs, n, q)
	return q, ok && bucket == seqs && bq == q
}

// blockStrideBound rounds a block-table width up to a power of two (at least
// minBlockStride).
func blockStrideBound(maxBlocks int) int {
	p := minBlockStride
	for p < maxBlocks {
		p <<= 1
	}
	return p
}

// paddedTables re-lays meta's block tables with rows of stride entries (zeros beyond each
// row's blocks) in a buffer the backend reuses.
func (b *Backend) paddedTables(meta *backend.StepMeta, stride int) []int32 {
	seqs := meta.NumSeqs()
	n := seqs * stride
	if cap(b.tables) < n {
		b.tables = make([]int32, n)
	}
	t := b.tables[:n]
	clear(t)
	for i := range seqs {
		copy(t[i*stride:], meta.BlockTables[i*meta.MaxBlocks:(i+1)*meta.MaxBlocks])
	}
	return t
}

// RunStep runs ops, the ops of step st. A step of a graph shape (GraphShape) runs eagerly
// the first time its key (owner, bucket, tokens per sequence, block-table stride) is seen,
// so that every buffer the ops need exists; the second time its ops are captured as a
// graph, and from then on the graph is replayed without calling ops. The step's metadata
// reaches the graph through the device buffers UploadStep fills with one asynchronous
// copy. owner must be comparable.
func (b *Backend) RunStep(st backend.Step, owner any, ops func() error) error {
	s, err := b.stepOf("run step", st)
	if err != nil {
		return err
	}
	if !s.graphable || owner == nil || b.dev.OpTimed() {
		// The op profile (DeviceOptions.OpTime) times steps op by op, eagerly.
		return ops()
	}
	if b.groupsAborted() {
		// A captured graph may hold the aborted communicators' work.
		return firstErr(fmt.Errorf("cuda run step: %w", errAborted), b.dropGraphs())
	}
	key := graphKey{owner: owner, seqs: s.meta.NumSeqs(), query: s.query, maxBlocks: s.maxBlocks}
	e := b.graphs[key]
	if e == nil {
		e = &graphEntry{}
		b.graphs[key] = e
	}
	switch {
	case e.graph != nil:
		return b.dev.LaunchGraph(e.graph)
	case e.failed != nil || e.seen == 0:
		e.seen++
		return ops()
	}
	b.capturing = true
	g, err := b.dev.Capture(ops)
	b.capturing = false
	if err != nil {
		if !b.warned {
			b.warned = true
			fmt.Fprintf(os.Stderr, "cuda: step of %d sequences of %d tokens not captured as a graph, running eagerly: %v\n", key.seqs, key.query, err)
		}
		// Something in the step cannot be captured (a buffer growing, say): run it eagerly,
		// now and from now on for this key.
		e.failed = err
		return ops()
	}
	e.graph = g
	return b.dev.LaunchGraph(g)
}

// GraphStats reports how many step graphs are captured and how many keys failed to
// capture, with the first failure.
func (b *Backend) GraphStats() (captured, failed int, firstErr error) {
	for _, e := range b.graphs {
		if e.graph != nil {
			captured++
		}
		if e.failed != nil {
			failed++
			if firstErr == nil {
				firstErr = e.failed
			}
		}
	}
	return captured, failed, firstErr
}

// dropGraphs destroys every captured graph (inside Run): called whenever a buffer is freed,
// since a graph holds device addresses.
func (b *Backend) dropGraphs() error {
	var errs []error
	for k, e := range b.graphs {
		if e.graph != nil {
			errs = append(errs, b.dev.FreeGraph(e.graph))
		}
		delete(b.graphs, k)
	}
	return firstErr(errs...)
}

// Compile-time checks of the optional interfaces.
var (
	_ backend.StepGrapher = (*Backend)(nil)
)
