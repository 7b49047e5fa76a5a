package engine

import (
	"fmt"
	"slices"
	"sync"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/model"
)

// This file holds the engine's side of prefill/decode disaggregation: a prefill instance
// pins the cached blocks of a prompt it computed and reads them out (PinPrefix, ReadBlocks,
// Unpin); a decode instance admits a request with the blocks of its prompt's leading full
// blocks imported (Request.ImportKV). Both go through the KV block I/O seam: the bytes are
// the backend-independent host layout of model.KVCache.ReadBlocks.

// KVImport is the KV of a request's leading full prompt blocks, computed by another
// instance of the same model: the blocks' chained hashes and their bytes, block after
// block, Engine.BlockBytes each.
type KVImport struct {
	Hashes []kvcache.BlockHash
	Data   []byte
}

// importWrite is imported KV on its way into blocks: written by the forward goroutine before
// the next step's copies and forward pass, so after every step that ran on those blocks
// before (an aborted request's step may still be writing a block just freed) and before
// every step that reads them.
type importWrite struct {
	holder kvcache.RequestID
	blocks []int32
	data   []byte
}

// BlockBytes is the bytes of one KV block in the host layout of the block I/O seam (0 when
// the model cannot move blocks).
func (e *Engine) BlockBytes() int {
	if io, ok := e.model.(BlockIO); ok {
		return io.BlockBytes()
	}
	return 0
}

// KVPin is a prompt's cached blocks held for reading (Engine.PinPrefix).
type KVPin struct {
	// ID names the pin for Unpin.
	ID string
	// Blocks are the pinned blocks in logical order, Hashes their chained hashes.
	Blocks []int32
	Hashes []kvcache.BlockHash
}

// PinPrefix holds the longest cached prefix of tokens (full blocks, hashed with salt) until
// Unpin, so that ReadBlocks can copy them out while nothing evicts or overwrites them. A
// prompt just computed by a request that has finished is cached in full unless the pool
// was so full that its blocks were reused since. The pin's Blocks are empty when nothing of
// tokens is cached.
func (e *Engine) PinPrefix(tokens []int32, salt string) (KVPin, error) {
	var pin KVPin
	err := e.onLoop(func() error {
		e.pins++
		id := fmt.Sprintf("pin-%d", e.pins)
		ex, err := e.kv.PinPrefix(kvcache.RequestID(id), tokens, salt)
		if err != nil {
			return err
		}
		if len(ex.Table) > 0 {
			pin = KVPin{ID: id, Blocks: ex.Table, Hashes: ex.Hashes}
		}
		e.publishStats()
		return nil
	})
	return pin, err
}

// Unpin releases a pin's blocks (an unknown or empty pin does nothing).
func (e *Engine) Unpin(pin KVPin) {
	if pin.ID == "" {
		return
	}
	e.onLoop(func() error {
		e.kv.Free(kvcache.RequestID(pin.ID))
		e.publishStats()
		return nil
	})
}

// ReadBlocks copies the keys and values of pinned blocks into dst, BlockBytes each, in the
// host layout of the block I/O seam. It may run while steps run: the backend serializes its
// operations, and no step writes a pinned block.
func (e *Engine) ReadBlocks(blocks []int32, dst []byte) error {
	io, ok := e.model.(BlockIO)
	if !ok {
		return fmt.Errorf("engine: this model cannot read out KV blocks")
	}
	return io.ReadBlocks(blocks, dst)
}

// onLoop runs fn on the engine loop and returns its error (ErrClosed once the engine
// stops).
func (e *Engine) onLoop(fn func() error) error {
	done := make(chan error, 1)
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		return ErrClosed
	}
	e.inbox = append(e.inbox, command{run: func() { done <- fn() }})
	e.mu.Unlock()
	e.signal()
	select {
	case err := <-done:
		return err
	case <-e.done:
		// The loop ran the commands it had before it stopped.
		select {
		case err := <-done:
			return err
		default:
			return ErrClosed
		}
	}
}

// importKV takes a new request's imported KV (Request.ImportKV): the leading blocks whose
// hashes agree with the request's own prompt (same tokens, same salt, same block size)
// are allocated under a holder of the request (blocks it caches already are shared, not
// written), queued to be written before the next step, and offered to the prefix cache, so
// that the request's admission finds them as prefix hits. The holder keeps them until the
// request completes. Whatever does not fit or match is computed as usual.
func (e *Engine) importKV(r *request) {
	imp := r.importKV
	r.importKV = nil
	io, ok := e.model.(BlockIO)
	if imp == nil || !ok || !e.kv.PrefixCacheEnabled() || r.policy.Drops() {
		return
	}
	bb, bs := io.BlockBytes(), e.cfg.BlockSize
	if bb <= 0 || len(imp.Data) != len(imp.Hashes)*bb {
		return
	}
	own := kvcache.ChainHashes(r.prompt, bs, r.salt)
	n := 0
	for n < len(own) && n < len(imp.Hashes) && own[n] == imp.Hashes[n] {
		n++
	}
	if n == 0 {
		return
	}
	id := kvcache.RequestID(r.id + "#import")
	tokens := r.prompt[:n*bs]
	im, ok, err := e.kv.ImportBlocks(id, tokens, r.salt)
	if err != nil || !ok {
		return
	}
	if err := e.kv.CacheFullBlocks(id, tokens, len(tokens)); err != nil {
		e.kv.Free(id)
		return
	}
	if first := im.NumCachedTokens / bs; first < n {
		e.writes = append(e.writes, importWrite{holder: id, blocks: im.Table[first:n], data: imp.Data[first*bb : n*bb]})
	}
	r.importHold = id
}

// releaseImport frees a completed request's import holder.
func (e *Engine) releaseImport(r *request) {
	if r.importHold != "" {
		e.kv.Free(r.importHold)
		r.importHold = ""
	}
}

// writeImports performs a step's imported-KV writes (forward goroutine).
func (r *runner) writeImports(writes []importWrite) error {
	io, ok := r.model.(BlockIO)
	if !ok && len(writes) > 0 {
		return fmt.Errorf("engine: imported KV on a model that cannot write blocks")
	}
	for _, w := range writes {
		if err := io.WriteBlocks(w.blocks, w.data); err != nil {
			return fmt.Errorf("engine: imported KV: %w", err)
		}
	}
	return nil
}

// LayerKVFunc receives one layer part of a request's full prompt blocks that a step has
// just completed (Request.OnLayerKV): first is the index in the prompt of the first of
// them, layer the part's index (0 to BlockBytes/LayerBlockBytes-1), data that part of them,
// block after block, Engine.LayerBlockBytes each: bytes [layer x LayerBlockBytes, (layer+1)
// x LayerBlockBytes) of each block in the host layout of the block I/O seam (on a model not
// split by tensor, the layer's keys, then its values). It is called while the step runs, as
// soon as the part is out of the cache (the next layers computing meanwhile): on a model
// split by tensor or pipeline, once every rank's piece of it is (model.KVCache.LayerPieces).
// It is called from a goroutine of the step's, part after part, every call before the
// step's result is taken; it must return quickly, and data is valid only during the call.
// A part whose copy failed is not reported.
type LayerKVFunc func(first, layer int, data []byte)

// layerStreamer is a Model whose steps call per-layer hooks (model.Batch.AfterLayer).
type layerStreamer interface {
	StreamsLayers() bool
	LayerBlockBytes() int
	BlockBytes() int
	LayerPieces() []model.LayerPiece
}

func (p *pagedModel) StreamsLayers() bool { return p.m.StreamsLayers() }

func (p *pagedModel) LayerBlockBytes() int { return p.kv.LayerBlockBytes() }

func (p *pagedModel) LayerPieces() []model.LayerPiece { return p.kv.LayerPieces() }

// StreamsLayers reports whether the model's steps report prompt KV layer by layer
// (Request.OnLayerKV): every rank's backend reads a layer's blocks between a step's ops
// (the CPU and CUDA backends), the model split by tensor or pipeline or not.
func (e *Engine) StreamsLayers() bool {
	ls, ok := e.model.(layerStreamer)
	return ok && ls.StreamsLayers()
}

// LayerBlockBytes is the bytes of one layer's part of a block in the host layout of the
// block I/O seam (LayerKVFunc; BlockBytes over the model's layers), 0 when the model cannot
// move blocks.
func (e *Engine) LayerBlockBytes() int {
	if ls, ok := e.model.(layerStreamer); ok {
		return ls.LayerBlockBytes()
	}
	return 0
}

// layerReport is a step's per-layer report of a request's prompt blocks it completes: the
// prompt's blocks [first, first+n), at entries [at, at+n) of the step's blocks to read.
type layerReport struct {
	fn           LayerKVFunc
	first, at, n int
}

// layerReads are a step's per-layer reads of the prompt blocks its requests want reported
// (Request.OnLayerKV): one read of every report's blocks for each layer piece the model's
// ranks compute (model.LayerPiece), each piece's bytes in a region of data, handed to the
// reports by a waiter goroutine part by part (LayerBlockBytes of each block), as soon as
// the copies of every piece that falls in the part are done.
type layerReads struct {
	reports []layerReport
	blocks  []int32 // the physical blocks of every report, in report order
	bytes   int     // a block's layer part
	layers  int     // a block's parts
	// pieces are the model's layer pieces, which tile a block (model.KVCache.LayerPieces).
	pieces []model.LayerPiece
	// data holds piece p's bytes of every block at [p.Offset x n, (p.Offset+p.Bytes) x n)
	// (n blocks): a piece that is a whole part (a model not split by tensor) is read in
	// place as that part, [layer][blocks][bytes]; parts holds, in that layout, the parts
	// made of several pieces, copied there by the waiter; filled counts each part's bytes
	// a block in place so far.
	data, parts []byte
	filled      []int
	// once starts the waiter at the step's first piece (the hook may be called from
	// several ranks' goroutines at once); waits carries each piece's wait to it
	// (capacity: every piece, so the forward pass never waits for it); done closes when
	// the waiter has handed them all.
	once  *sync.Once
	waits chan layerWait
	done  chan struct{}
}

// layerWait is one piece's copy on its way.
type layerWait struct {
	piece model.LayerPiece
	wait  func() error
}

// reportLayers adds to buf the prompt blocks of sc's request that its step completes, when
// the request asks for its layers (Request.OnLayerKV) and the model streams them: the
// blocks whose last slot the step writes, up to the prompt's last full block. table is the
// sequence's block table.
func (r *runner) reportLayers(buf *batchBuffer, sc scheduled, table []int32) {
	fn := sc.seq.req.onLayerKV
	if fn == nil || sc.dropped != 0 {
		return
	}
	ls, ok := r.model.(layerStreamer)
	if !ok || !ls.StreamsLayers() {
		return
	}
	bs := r.blockSize
	first, end := sc.start/bs, min(sc.start+sc.numNew, len(sc.seq.req.prompt))/bs
	if first >= end {
		return
	}
	lr := &buf.layers
	if lb := ls.LayerBlockBytes(); lb > 0 && lr.bytes != lb {
		lr.bytes, lr.layers, lr.pieces = lb, ls.BlockBytes()/lb, ls.LayerPieces()
	}
	lr.reports = append(lr.reports, layerReport{fn: fn, first: first, at: len(lr.blocks), n: end - first})
	lr.blocks = append(lr.blocks, table[first:end]...)
}

// reset empties the reads for the next step's build.
func (lr *layerReads) reset() {
	lr.reports, lr.blocks, lr.waits, lr.done = lr.reports[:0], lr.blocks[:0], nil, nil
	lr.once = new(sync.Once)
}

// start sizes the step's buffers and starts the waiter (once, at the step's first piece).
func (lr *layerReads) start() {
	n := len(lr.blocks) * lr.bytes
	if need := lr.layers * n; cap(lr.data) < need {
		lr.data = make([]byte, need)
	}
	lr.data = lr.data[:lr.layers*n]
	lr.filled = slices.Grow(lr.filled[:0], lr.layers)[:lr.layers]
	clear(lr.filled)
	lr.waits, lr.done = make(chan layerWait, len(lr.pieces)), make(chan struct{})
	go lr.hand()
}

// afterLayer is the step's model.Batch.AfterLayer when it reports layers: it queues the
// piece's read of every report's blocks and hands its wait to the waiter goroutine. A
// read that fails leaves the piece's parts unreported rather than failing the step.
func (lr *layerReads) afterLayer(piece model.LayerPiece, read model.LayerReader) error {
	lr.once.Do(lr.start)
	n := len(lr.blocks)
	if piece.Offset < 0 || piece.Bytes <= 0 || piece.Offset+piece.Bytes > lr.layers*lr.bytes {
		return fmt.Errorf("engine: layer %d's piece [%d, %d) outside a block of %d bytes", piece.Layer, piece.Offset, piece.Offset+piece.Bytes, lr.layers*lr.bytes)
	}
	wait, err := read(lr.blocks, lr.data[piece.Offset*n:][:piece.Bytes*n])
	if err != nil {
		// Not reported, the step unharmed: the prefill reads what it lacks out of the
		// cache once the chunk is computed.
		return nil
	}
	lr.waits <- layerWait{piece: piece, wait: wait}
	return nil
}

// hand waits for each piece's copy in turn, puts it in its parts and hands every part it
// completes to the reports (the waiter goroutine).
func (lr *layerReads) hand() {
	defer close(lr.done)
	n, lb := len(lr.blocks), lr.bytes
	for w := range lr.waits {
		if w.wait() != nil {
			continue // not reported: the prefill reads what it lacks out of the cache
		}
		p := w.piece
		if p.Bytes == lb && p.Offset%lb == 0 {
			// A whole part, read in place.
			layer := p.Offset / lb
			lr.filled[layer] = lb
			lr.report(layer, lr.data[layer*n*lb:][:n*lb])
			continue
		}
		if len(lr.parts) < len(lr.data) {
			lr.parts = make([]byte, len(lr.data))
		}
		src := lr.data[p.Offset*n:][:p.Bytes*n]
		for at := p.Offset; at < p.Offset+p.Bytes; {
			layer := at / lb
			end := min(p.Offset+p.Bytes, (layer+1)*lb)
			for i := range n {
				copy(lr.parts[layer*n*lb+i*lb+at-layer*lb:][:end-at], src[i*p.Bytes+at-p.Offset:][:end-at])
			}
			if lr.filled[layer] += end - at; lr.filled[layer] == lb {
				lr.report(layer, lr.parts[layer*n*lb:][:n*lb])
			}
			at = end
		}
	}
}

// report hands part layer of every report's blocks (data: the part of the step's blocks,
// block after block) to the reports.
func (lr *layerReads) report(layer int, data []byte) {
	for _, rep := range lr.reports {
		rep.fn(rep.first, layer, data[rep.at*lr.bytes:][:rep.n*lr.bytes])
	}
}

// finish waits until the waiter has handed every piece queued (after the step's forward
// pass, whatever its outcome).
func (lr *layerReads) finish() {
	if lr.waits == nil {
		return
	}
	close(lr.waits)
	<-lr.done
}
