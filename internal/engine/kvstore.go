package engine

import (
	"context"
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
)

// KVStore keeps KV blocks beyond the engine's cache (kvpool.Pool): a shared pool the
// engine saves the blocks it computes to, and a host tier it offloads the blocks its cache
// evicts to. On admission, after the local prefix cache's longest hit, the engine asks it
// for the blocks that follow and imports what it gets instead of computing it. Its methods
// are called from several goroutines; only Lookup may block, and none may fail a request.
type KVStore interface {
	// Lookup returns the keys and values of the longest run of refs' leading blocks the
	// store holds, BlockBytes each; the engine only reads them.
	Lookup(ctx context.Context, refs []kvcache.BlockRef) [][]byte
	// Shared reports whether Save keeps anything.
	Shared() bool
	// Save offers blocks the engine computed: kv holds refs' keys and values in order and
	// belongs to the store from now on. It must not block.
	Save(refs []kvcache.BlockRef, kv []byte)
	// Offloads reports whether Offload keeps anything.
	Offloads() bool
	// Offload offers a block the cache evicted (kv belongs to the store). It must not block.
	Offload(hash kvcache.BlockHash, kv []byte)
}

// BlockIO is the KV block I/O seam of a Model bound to its cache: its blocks read and
// written whole, in the layout of model.KVCache.ReadBlocks. A KVStore needs it, and so do
// the KV transfers of prefill/decode disaggregation (transfer.go); pagedModel has it, a
// test fake may not (the engine then neither exports nor imports).
type BlockIO interface {
	BlockBytes() int
	ReadBlocks(blocks []int32, dst []byte) error
	WriteBlocks(blocks []int32, src []byte) error
}

func (p *pagedModel) BlockBytes() int { return p.kv.BlockBytes() }

func (p *pagedModel) ReadBlocks(blocks []int32, dst []byte) error {
	return p.kv.ReadBlocks(blocks, dst)
}

func (p *pagedModel) WriteBlocks(blocks []int32, src []byte) error {
	return p.kv.WriteBlocks(blocks, src)
}

// blockWrite orders a step to write blocks from a KVStore into the cache before its
// forward pass: kv[i] goes to blocks[i].
type blockWrite struct {
	blocks []int32
	kv     [][]byte
}

// blockRead orders a step to read a block out of the cache before anything else in the
// step writes (so before the step's forward pass, copies and imports): to save it (ref
// set) or to offload it (evicted by the step's allocations).
type blockRead struct {
	block int32
	ref   kvcache.BlockRef
	save  bool
}

// fetchResult is a KVStore lookup's answer for a waiting sequence: the blocks from block
// index from on.
type fetchResult struct {
	seq  *sequence
	from int
	kv   [][]byte
}

// fetchedBlocks are a sequence's blocks from a KVStore, waiting for its admission.
type fetchedBlocks struct {
	from int
	kv   [][]byte
}

// useStore checks a KVStore's needs of the engine's model and returns the model's seam.
func useStore(m Model, d drafter) (BlockIO, error) {
	bio, ok := m.(BlockIO)
	if !ok {
		return nil, fmt.Errorf("engine: a KV store needs a model whose cache's blocks can be read and written")
	}
	if d.model != nil && !d.shared {
		return nil, fmt.Errorf("engine: a KV store with a draft model of its own is not supported (its cache would lack the imported blocks)")
	}
	return bio, nil
}

// startFetch asks the store for the blocks of seq's prompt that follow its local prefix hit
// and parks seq until the answer comes (as a command on the inbox); false when there is
// nothing to ask (no store, a full local hit, a request that takes no hits).
func (e *Engine) startFetch(seq *sequence) bool {
	r := seq.req
	if e.store == nil || !e.kv.PrefixCacheEnabled() || r.wantsPromptLogprobs() || r.policy.Drops() {
		return false
	}
	bs := e.cfg.BlockSize
	full := (len(seq.tokens) - 1) / bs // the last token is always computed
	local := e.kv.PeekPrefix(seq.tokens, r.salt)
	if local >= full {
		return false
	}
	hashes := kvcache.ChainHashes(seq.tokens[:full*bs], bs, r.salt)
	refs := kvcache.BlockRefs(seq.tokens, hashes, bs, local, full)
	ctx, cancel := context.WithCancel(context.Background())
	e.fetching[seq] = cancel
	e.fetches.Add(1)
	go func() {
		defer e.fetches.Done()
		kv := e.store.Lookup(ctx, refs)
		e.mu.Lock()
		e.inbox = append(e.inbox, command{fetched: &fetchResult{seq: seq, from: local, kv: kv}})
		e.mu.Unlock()
		e.signal()
	}()
	return true
}

// fetched takes a lookup's answer: the sequence, unless it ended meanwhile, waits for
// admission with the blocks found.
func (e *Engine) fetched(f *fetchResult) {
	cancel, ok := e.fetching[f.seq]
	if !ok {
		return // its request ended while the lookup ran
	}
	cancel()
	delete(e.fetching, f.seq)
	if len(f.kv) > 0 {
		f.seq.fetched = &fetchedBlocks{from: f.from, kv: f.kv}
	}
	e.sched.add(f.seq)
}

// endFetch forgets a request's lookup in flight, if any (the request ended).
func (e *Engine) endFetch(r *request) {
	if len(r.seqs) == 0 {
		return
	}
	if cancel, ok := e.fetching[r.seqs[0]]; ok {
		cancel()
		delete(e.fetching, r.seqs[0])
	}
}

// orderSaves orders the blocks of seq finalized through its step sc, and not offered yet,
// to be saved to the store (read in the next step, see blockRead).
func (e *Engine) orderSaves(seq *sequence, sc *scheduled) {
	bs := e.cfg.BlockSize
	done := (sc.start + sc.numNew) / bs
	if done <= seq.saved {
		return
	}
	exp, err := e.kv.ExportBlocks(seq.id)
	if err != nil {
		return
	}
	n := min(done, len(exp.Hashes))
	for i := seq.saved; i < n; i++ {
		ref := kvcache.BlockRef{Hash: exp.Hashes[i], Tokens: seq.tokens[i*bs : (i+1)*bs]}
		if i > 0 {
			ref.Parent = exp.Hashes[i-1]
		}
		e.reads = append(e.reads, blockRead{block: exp.Table[i], ref: ref, save: true})
	}
	seq.saved = max(seq.saved, n)
}

// onKVEvent sees the cache's events: an evicted block is ordered read for the host tier
// by the step whose allocations evicted it (see plan), then the user's listener is told.
func (e *Engine) onKVEvent(ev kvcache.Event) {
	if ev.Evicted && e.store != nil && e.store.Offloads() {
		e.victims = append(e.victims, blockRead{block: ev.Block, ref: kvcache.BlockRef{Hash: ev.Hash}})
	}
	if e.cfg.OnKVEvent != nil {
		e.cfg.OnKVEvent(ev)
	}
}

// readBlocks carries out read orders: the blocks' keys and values go to the store. It runs
// where the step's forward pass runs, before anything in the step writes. A failed read
// loses only the copy.
func readBlocks(bio BlockIO, store KVStore, reads []blockRead) {
	if len(reads) == 0 {
		return
	}
	bb := bio.BlockBytes()
	var saveRefs []kvcache.BlockRef
	var saveBlocks []int32
	for _, rd := range reads {
		if !rd.save {
			kv := make([]byte, bb)
			if bio.ReadBlocks([]int32{rd.block}, kv) == nil {
				store.Offload(rd.ref.Hash, kv)
			}
			continue
		}
		saveRefs = append(saveRefs, rd.ref)
		saveBlocks = append(saveBlocks, rd.block)
	}
	if len(saveBlocks) > 0 {
		kv := make([]byte, len(saveBlocks)*bb)
		if bio.ReadBlocks(saveBlocks, kv) == nil {
			store.Save(saveRefs, kv)
		}
	}
}

// writeBlocks carries out a step's imports before its forward pass.
func writeBlocks(bio BlockIO, writes []blockWrite) error {
	bb := bio.BlockBytes()
	for _, w := range writes {
		buf := make([]byte, 0, len(w.blocks)*bb)
		for _, kv := range w.kv {
			if len(kv) != bb {
				return fmt.Errorf("engine: imported block of %d bytes, want %d", len(kv), bb)
			}
			buf = append(buf, kv...)
		}
		if err := bio.WriteBlocks(w.blocks, buf); err != nil {
			return fmt.Errorf("engine: import blocks: %w", err)
		}
	}
	return nil
}

// SyncStore waits until the engine is idle and has handed the store every block it computed
// so far (the store may still be writing them), or ctx ends.
func (e *Engine) SyncStore(ctx context.Context) error {
	c := make(chan struct{})
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		return ErrClosed
	}
	e.inbox = append(e.inbox, command{synced: c})
	e.mu.Unlock()
	e.signal()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
