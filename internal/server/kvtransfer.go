package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/kvtransfer"
)

// The instance roles of prefill/decode disaggregation (Config.Role).
const (
	// RoleBoth serves requests whole (the default).
	RoleBoth = "both"
	// RolePrefill also computes prompts for decode instances and sends them their KV
	// (POST /v1/kv_prefill/...).
	RolePrefill = "prefill"
	// RoleDecode also receives KV transfers (Config.KVReceiver) and admits the requests
	// that name one (TransferHeader) with its blocks imported.
	RoleDecode = "decode"
)

// Roles lists the instance roles.
var Roles = []string{RoleBoth, RolePrefill, RoleDecode}

// The headers of the disaggregation handshake (docs/KV_TRANSFER.md).
const (
	// TransferHeader names a KV transfer: on POST /v1/kv_prefill/..., the id the prefill
	// instance sends the blocks under; on a generation request to a decode instance, the
	// transfer whose blocks the request is admitted with.
	TransferHeader = "X-Kvasir-KV-Transfer"
	// TransferTargetHeader is, on POST /v1/kv_prefill/..., the decode instance's transfer
	// address (host:port, from its GET /v1/kv_transfer).
	TransferTargetHeader = "X-Kvasir-KV-Target"
)

// kvTransferInfo is the body of GET /v1/kv_transfer.
type kvTransferInfo struct {
	Role string `json:"role"`
	// Address is where a decode instance receives transfers ("" for other roles).
	Address    string `json:"address,omitempty"`
	BlockSize  int    `json:"block_size"`
	BlockBytes int    `json:"block_bytes"`
}

// handleKVTransferInfo answers GET /v1/kv_transfer: the instance's role and, for a decode
// instance, the address its transfers go to.
func (s *Server) handleKVTransferInfo(w http.ResponseWriter, r *http.Request) {
	info := kvTransferInfo{Role: s.role(), BlockSize: s.eng.BlockSize(), BlockBytes: s.eng.BlockBytes()}
	if s.cfg.KVReceiver != nil {
		info.Address = s.cfg.KVTransferAddress
	}
	writeJSON(w, http.StatusOK, info)
}

// role is the instance's role ("" is RoleBoth).
func (s *Server) role() string {
	if s.cfg.Role == "" {
		return RoleBoth
	}
	return s.cfg.Role
}

// kvPrefillResponse is the body of a successful POST /v1/kv_prefill/...
type kvPrefillResponse struct {
	TransferID   string `json:"transfer_id"`
	PromptTokens int    `json:"prompt_tokens"`
	NumBlocks    int    `json:"num_blocks"`
	Bytes        int64  `json:"bytes"`
	// LayersStreamed counts the (block, layer) parts sent as soon as their layer was
	// computed; the others were read out of their blocks once their chunk was computed.
	LayersStreamed int     `json:"layers_streamed"`
	PrefillMS      float64 `json:"prefill_ms"`
	TransferMS     float64 `json:"transfer_ms"`
}

// handleKVPrefill answers POST /v1/kv_prefill/completions and
// /v1/kv_prefill/chat/completions on a prefill instance: the body of a request to the
// endpoint named, tokenized as that endpoint would; its prompt is computed (one greedy
// token, then dropped), its cached full blocks are pinned and streamed to the decode
// instance named by TransferTargetHeader under the id of TransferHeader, and unpinned
// once the receiver acknowledged them or the transfer failed. 200 means the decode
// instance holds the blocks; 502 that the transfer failed (the decode request then
// computes its prompt itself).
func (s *Server) handleKVPrefill(chat bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.role() != RolePrefill {
			writeError(w, notFound("", "", "this instance is not a prefill instance (kvasir serve --role prefill)"))
			return
		}
		id, target := r.Header.Get(TransferHeader), r.Header.Get(TransferTargetHeader)
		if id == "" || len(id) > 256 || target == "" {
			writeError(w, badRequest("", "the %s (1 to 256 bytes) and %s headers are required", TransferHeader, TransferTargetHeader))
			return
		}
		if _, _, err := net.SplitHostPort(target); err != nil {
			writeError(w, badRequest("", "%s %.100q: want host:port (%v)", TransferTargetHeader, target, err))
			return
		}
		reqs, ok := s.readHashedRequest(w, r, chat)
		if !ok {
			return
		}
		if len(reqs) != 1 {
			writeError(w, badRequest("prompt", "a prefill takes one prompt, not %d", len(reqs)))
			return
		}
		res, err := s.prefill(r.Context(), id, target, reqs[0])
		if err != nil {
			if apiErr, ok := errors.AsType[*APIError](err); ok {
				writeError(w, apiErr)
				return
			}
			s.log.Warn("kv prefill: transfer failed", "transfer_id", id, "target", target, "err", err)
			writeError(w, &APIError{Status: http.StatusBadGateway, Type: "server_error", Code: "kv_transfer_failed", Message: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// DefaultPrefillChunk is how many prompt tokens a prefill instance computes before it sends
// their blocks (Config.KVPrefillChunk).
const DefaultPrefillChunk = 512

// prefill computes kreq's prompt chunk by chunk and streams its blocks to target as they
// are computed: each layer's part of a chunk's blocks as soon as the layer is computed,
// while the next layer computes (on an engine that streams layers, unless
// Config.KVStreamChunks), or each chunk's blocks once the chunk is computed, while the next
// chunk computes. The connection opens once the first part is at hand.
func (s *Server) prefill(ctx context.Context, id, target string, kreq kvasir.Request) (kvPrefillResponse, error) {
	bs := s.eng.BlockSize()
	tokens := kreq.PromptTokens
	res := kvPrefillResponse{TransferID: id, PromptTokens: len(tokens)}
	full := len(tokens) / bs
	if full == 0 {
		return res, fmt.Errorf("no full block in a prompt of %d tokens (blocks of %d)", len(tokens), bs)
	}
	chunk := s.cfg.KVPrefillChunk
	if chunk <= 0 {
		chunk = DefaultPrefillChunk
	}
	layers := s.eng.BlockLayers()
	if layers <= 0 {
		return res, errors.New("this model's KV blocks have no layers to send")
	}
	ctx, cancel := context.WithCancel(ctx)
	src := &layerPrefill{s: s, id: id, req: kreq, chunk: max(bs, chunk/bs*bs), start: time.Now(),
		full: full, layers: layers, bb: s.eng.BlockBytes(), lb: s.eng.LayerBlockBytes(),
		stream: s.eng.StreamsLayers() && !s.cfg.KVStreamChunks,
		have:   make([]bool, full*layers), wake: make(chan struct{}, 1), first: make(chan struct{}), done: make(chan struct{})}
	go src.run(ctx)
	defer func() {
		cancel()
		<-src.done
		for _, pin := range src.pins {
			s.eng.Unpin(pin)
		}
	}()
	select {
	case <-src.first:
	case <-src.done:
		if src.err != nil {
			return res, src.err
		}
	}
	t := time.Now()
	h := kvtransfer.Header{ID: id, Model: s.eng.ModelName(), BlockSize: bs, BlockBytes: src.bb, KVCacheDType: s.eng.KVCacheDType(),
		KVLayout: s.eng.KVLayout(), NumBlocks: full, NumLayers: layers}
	sender := s.cfg.KVSender
	if sender == nil {
		sender = &kvtransfer.Sender{}
	}
	err := sender.Send(ctx, target, h, s.eng.BlockHashes(tokens, kreq.CacheSalt)[:full], src)
	s.metrics.observeTransfer("sent", err, int64(full)*int64(src.bb))
	if err != nil {
		return res, err
	}
	// Every part was sent: the last chunk is computed, and run returns once it pinned it.
	<-src.done
	res.NumBlocks, res.Bytes = full, int64(full)*int64(src.bb)
	res.LayersStreamed = src.streamed
	res.PrefillMS, res.TransferMS = millis(src.computed.Sub(src.start)), millis(time.Since(t))
	return res, nil
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// layerPart is one layer of one block of a prompt, computed and waiting to be sent.
type layerPart struct {
	block, layer int
	data         []byte
}

// layerPrefill computes a prompt chunk after chunk, pinning each chunk's blocks, and is the
// sender's Source of the layers of its full blocks: each layer's part of a block as the
// engine reports it computed (Request.OnLayerKV, when stream is set), and, once a chunk is
// computed and pinned, every part of its blocks not reported so (blocks taken from the
// prefix cache, or every block when the engine does not stream layers) read out of the
// pinned blocks.
type layerPrefill struct {
	s     *Server
	id    string
	req   kvasir.Request
	chunk int // tokens per chunk, a multiple of the block size
	start time.Time
	// full is the prompt's full blocks, layers a block's layer parts of lb bytes (bb a
	// block's); stream whether the engine reports layers as computed.
	full, layers, lb, bb int
	stream               bool

	mu    sync.Mutex
	queue []layerPart // computed, not yet sent
	have  []bool      // [block*layers+layer]: queued once (a part computed again is dropped)
	// streamed counts the parts queued as the engine computed them; started is set with
	// the first part queued.
	streamed int
	started  bool
	// wake (capacity 1) is signalled when a part is queued or run returns; first closes
	// with the first part queued.
	wake  chan struct{}
	first chan struct{}

	// done closes when run returns, after which err (why it stopped early), pins (every
	// pin run made) and computed (when the last chunk was computed) may be read.
	done     chan struct{}
	err      error
	pins     []kvasir.KVPin
	computed time.Time
}

// run computes the chunks of the prompt's full blocks (the tail after them is the decode
// instance's to compute): each a request for the prompt up to the chunk's end, whose
// earlier chunks are prefix-cache hits (pinned), with one greedy token that is dropped.
// After each chunk it queues the parts of the chunk's blocks the engine did not report.
func (c *layerPrefill) run(ctx context.Context) {
	defer func() {
		close(c.done)
		c.signal()
	}()
	eng, bs := c.s.eng, c.s.eng.BlockSize()
	tokens := c.req.PromptTokens[:c.full*bs]
	req := c.req
	if c.stream {
		req.OnLayerKV = c.reported
	}
	sent := 0
	for k, end := 0, min(c.chunk, len(tokens)); ; k, end = k+1, min(end+c.chunk, len(tokens)) {
		if c.err = c.s.computePrompt(ctx, fmt.Sprintf("prefill-%s-%d", c.id, k), req, tokens[:end]); c.err != nil {
			return
		}
		pin, err := eng.PinPrefix(tokens[:end], c.req.CacheSalt)
		if err != nil {
			c.err = err
			return
		}
		c.pins = append(c.pins, pin)
		want := end / bs
		if len(pin.Blocks) < want {
			c.err = fmt.Errorf("blocks %d to %d of the prompt left the cache before they were pinned (the KV pool is too small for the load)", len(pin.Blocks), want-1)
			return
		}
		if end == len(tokens) {
			c.computed = time.Now()
		}
		if c.err = c.readPinned(pin.Blocks, sent, want); c.err != nil {
			return
		}
		sent = want
		if end == len(tokens) {
			return
		}
	}
}

// reported is the chunk requests' Request.OnLayerKV: it queues the layer's part of each
// block reported (on the engine's forward goroutine, so it only copies).
func (c *layerPrefill) reported(first, layer int, data []byte) {
	for i := range len(data) / c.lb {
		if c.add(first+i, layer, data[i*c.lb:][:c.lb]) {
			c.mu.Lock()
			c.streamed++
			c.mu.Unlock()
		}
	}
}

// readPinned queues the parts of the prompt's blocks [from, to) not queued yet, read out
// of their pinned blocks (the pin's, in prompt order).
func (c *layerPrefill) readPinned(pinned []int32, from, to int) error {
	var buf []byte
	for b := from; b < to; b++ {
		c.mu.Lock()
		missing := slices.Contains(c.have[b*c.layers:(b+1)*c.layers], false)
		c.mu.Unlock()
		if !missing {
			continue
		}
		if buf == nil {
			buf = make([]byte, c.bb)
		}
		if err := c.s.eng.ReadBlocks(pinned[b:b+1], buf); err != nil {
			return err
		}
		for l := range c.layers {
			c.add(b, l, buf[l*c.lb:][:c.lb])
		}
	}
	return nil
}

// add queues a copy of layer's part of block unless one was queued, reporting whether it
// queued it.
func (c *layerPrefill) add(block, layer int, data []byte) bool {
	if block < 0 || block >= c.full {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := block*c.layers + layer
	if c.have[k] {
		return false
	}
	if !c.started {
		c.started = true
		close(c.first)
	}
	c.have[k] = true
	c.queue = append(c.queue, layerPart{block: block, layer: layer, data: slices.Clone(data)})
	c.signal()
	return true
}

// signal wakes Next.
func (c *layerPrefill) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Next gives the sender the next part queued, waiting for one; io.EOF once run has
// returned and every part was given, or run's error.
func (c *layerPrefill) Next(ctx context.Context, dst []byte) (int, int, error) {
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			p := c.queue[0]
			c.queue[0] = layerPart{}
			c.queue = c.queue[1:]
			c.mu.Unlock()
			copy(dst, p.data)
			return p.block, p.layer, nil
		}
		c.mu.Unlock()
		select {
		case <-c.done:
			c.mu.Lock()
			empty := len(c.queue) == 0
			c.mu.Unlock()
			if !empty {
				continue
			}
			if c.err != nil {
				return 0, 0, c.err
			}
			return 0, 0, io.EOF
		default:
		}
		select {
		case <-c.wake:
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
}

// computePrompt runs tokens as a request of one greedy token that is dropped: only the
// prompt's KV matters (no processors, the full KV policy); kreq's OnLayerKV is told of it
// layer by layer.
func (s *Server) computePrompt(ctx context.Context, id string, kreq kvasir.Request, tokens []int32) error {
	run := kvasir.Request{PromptTokens: tokens, CacheSalt: kreq.CacheSalt, Priority: kreq.Priority, Params: kvasir.SamplingParams{MaxTokens: 1},
		OnLayerKV: kreq.OnLayerKV}
	ch, apiErr := s.submit(ctx, id, []kvasir.Request{run}, "prompt")
	if apiErr != nil {
		return apiErr
	}
	for it := range ch {
		if it.Out.Err != nil {
			return fmt.Errorf("prefill: %w", it.Out.Err)
		}
	}
	return ctx.Err()
}

// readHashedRequest reads the body of a request to the completions (or, with chat, the chat
// completions) endpoint and builds its engine requests as that endpoint would, answering
// the client itself when it cannot.
func (s *Server) readHashedRequest(w http.ResponseWriter, r *http.Request, chat bool) ([]kvasir.Request, bool) {
	if chat {
		req := chatRequest{commonRequest: commonRequest{limits: &s.cfg.Limits}}
		if !s.readRequest(w, r, &req, func() string { return req.Model }) {
			return nil, false
		}
		kreq, _, apiErr := s.chatRequest(r.Context(), &req)
		if apiErr != nil {
			writeError(w, apiErr)
			return nil, false
		}
		return []kvasir.Request{kreq}, true
	}
	req := completionRequest{commonRequest: commonRequest{limits: &s.cfg.Limits}}
	if !s.readRequest(w, r, &req, func() string { return req.Model }) {
		return nil, false
	}
	reqs, apiErr := s.completionRequests(&req)
	if apiErr != nil {
		writeError(w, apiErr)
		return nil, false
	}
	return reqs, true
}

// transferKey is the context key of a generation request's KV transfer id.
type transferKey struct{}

// withTransfer puts the KV transfer a generation request names (TransferHeader) into its
// context, for submit, on a server that receives transfers.
func (s *Server) withTransfer(next http.Handler) http.Handler {
	if s.cfg.KVReceiver == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get(TransferHeader); id != "" && generatePaths[r.URL.Path] {
			r = r.WithContext(context.WithValue(r.Context(), transferKey{}, id))
		}
		next.ServeHTTP(w, r)
	})
}

// attachTransfer gives a request whose context names a KV transfer that transfer's blocks,
// when the receiver holds it; otherwise the request computes its prompt.
func (s *Server) attachTransfer(ctx context.Context, reqs []kvasir.Request) {
	id, _ := ctx.Value(transferKey{}).(string)
	if id == "" || s.cfg.KVReceiver == nil {
		return
	}
	got, ok := s.cfg.KVReceiver.Take(id)
	switch {
	case !ok:
		s.log.Warn("kv transfer not held (failed, expired or never sent): computing the prompt", "transfer_id", id)
		s.metrics.observeImport("missing")
	case len(reqs) != 1:
		s.log.Warn("kv transfer for a request of several prompts: computing them", "transfer_id", id)
		s.metrics.observeImport("refused")
	default:
		reqs[0].ImportKV = &kvasir.KVImport{Hashes: got.Hashes, Data: got.Data}
		s.metrics.observeImport("imported")
	}
}

// kvTransferRoutes adds the disaggregation endpoints.
func (s *Server) kvTransferRoutes(mux *http.ServeMux) {
	mux.Handle("/v1/kv_transfer", method(http.MethodGet, s.handleKVTransferInfo))
	mux.Handle("/v1/kv_prefill/completions", method(http.MethodPost, s.handleKVPrefill(false)))
	mux.Handle("/v1/kv_prefill/chat/completions", method(http.MethodPost, s.handleKVPrefill(true)))
}
