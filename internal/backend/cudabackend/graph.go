package cudabackend

import (
	"fmt"
	"os"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

// maxGraphSeqs is the largest decode bucket replayed as a graph; larger decode steps run
// eagerly.
const maxGraphSeqs = 256

// minBlockStride is the smallest block-table stride of a graphable decode step.
const minBlockStride = 16

// graphKey names one captured decode graph: the buffers it uses (owner), its sequence
// count and its block-table stride.
type graphKey struct {
	owner     any
	seqs      int
	maxBlocks int
}

// graphEntry is the state of one graph key: how often its step ran eagerly, its graph once
// captured, and whether capturing failed (the step then always runs eagerly).
type graphEntry struct {
	seen   int
	graph  *cuda.Graph
	failed error
}

// DecodeBucket returns the sequence count a decode step of n sequences is padded to: the
// next power of two up to maxGraphSeqs, n itself above.
func (b *Backend) DecodeBucket(n int) int {
	if n <= 0 || n > maxGraphSeqs {
		return n
	}
	p := 1
	for p < n {
		p <<= 1
	}
	return p
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

// RunStep runs ops, the ops of step st. A decode step of a bucket's size runs eagerly the
// first time its key (owner, bucket, block-table stride) is seen, so that every buffer the
// ops need exists; the second time its ops are captured as a graph, and from then on the
// graph is replayed without calling ops. The step's metadata reaches the graph through the
// device buffers UploadStep fills with one asynchronous copy. owner must be comparable.
func (b *Backend) RunStep(st backend.Step, owner any, ops func() error) error {
	s, err := b.stepOf("run step", st)
	if err != nil {
		return err
	}
	if !s.graphable || owner == nil || b.dev.OpTimed() {
		// The op profile (DeviceOptions.OpTime) times decode steps op by op, eagerly.
		return ops()
	}
	if b.groupsAborted() {
		// A captured graph may hold the aborted communicators' work.
		return firstErr(fmt.Errorf("cuda run step: %w", errAborted), b.dropGraphs())
	}
	key := graphKey{owner: owner, seqs: s.meta.NumSeqs(), maxBlocks: s.maxBlocks}
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
			fmt.Fprintf(os.Stderr, "cuda: decode step of %d sequences not captured as a graph, running eagerly: %v\n", key.seqs, err)
		}
		// Something in the step cannot be captured (a buffer growing, say): run it eagerly,
		// now and from now on for this key.
		e.failed = err
		return ops()
	}
	e.graph = g
	return b.dev.LaunchGraph(g)
}

// GraphStats reports how many decode graphs are captured and how many keys failed to
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
