package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
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
	TransferID   string  `json:"transfer_id"`
	PromptTokens int     `json:"prompt_tokens"`
	NumBlocks    int     `json:"num_blocks"`
	Bytes        int64   `json:"bytes"`
	PrefillMS    float64 `json:"prefill_ms"`
	TransferMS   float64 `json:"transfer_ms"`
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

// prefill computes kreq's prompt chunk by chunk and streams each chunk's blocks to target
// as soon as they are computed, while the next chunk computes; the first chunk is computed
// before the connection opens.
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
	ctx, cancel := context.WithCancel(ctx)
	src := &chunkedPrefill{s: s, id: id, req: kreq, chunk: max(bs, chunk/bs*bs), start: time.Now(),
		ready: make(chan []int32), done: make(chan struct{})}
	go src.run(ctx)
	defer func() {
		cancel()
		<-src.done
		for _, pin := range src.pins {
			s.eng.Unpin(pin)
		}
	}()
	first, ok := <-src.ready
	if !ok {
		return res, src.err
	}
	src.have = first
	t := time.Now()
	bb := s.eng.BlockBytes()
	h := kvtransfer.Header{ID: id, Model: s.eng.ModelName(), BlockSize: bs, BlockBytes: bb, KVCacheDType: s.eng.KVCacheDType(), NumBlocks: full}
	sender := s.cfg.KVSender
	if sender == nil {
		sender = &kvtransfer.Sender{}
	}
	err := sender.Send(ctx, target, h, s.eng.BlockHashes(tokens, kreq.CacheSalt)[:full], src)
	s.metrics.observeTransfer("sent", err, int64(full)*int64(bb))
	if err != nil {
		return res, err
	}
	res.NumBlocks, res.Bytes = full, int64(full)*int64(bb)
	res.PrefillMS, res.TransferMS = millis(src.computed.Sub(src.start)), millis(time.Since(t))
	return res, nil
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// chunkedPrefill computes a prompt chunk after chunk, pinning each chunk's blocks, and is
// the sender's Source of them: a block is read as soon as its chunk is computed.
type chunkedPrefill struct {
	s     *Server
	id    string
	req   kvasir.Request
	chunk int // tokens per chunk, a multiple of the block size
	start time.Time
	// ready carries each chunk's new blocks once computed and pinned, in order; closed
	// after the last, or early with err saying why. done closes when run returns, after
	// which pins (every pin run made) and computed (when the last chunk was computed) may
	// be read.
	ready    chan []int32
	err      error
	done     chan struct{}
	pins     []kvasir.KVPin
	computed time.Time
	// have are the blocks received from ready so far (the sender's goroutine).
	have []int32
}

// run computes the chunks of the prompt's full blocks (the tail after them is the decode
// instance's to compute): each a request for the prompt up to the chunk's end, whose
// earlier chunks are prefix-cache hits (pinned), with one greedy token that is dropped.
// Every chunk brings at least one block, so the sender takes every chunk it sends.
func (c *chunkedPrefill) run(ctx context.Context) {
	defer close(c.done)
	defer close(c.ready)
	eng, bs := c.s.eng, c.s.eng.BlockSize()
	tokens := c.req.PromptTokens[:len(c.req.PromptTokens)/bs*bs]
	sent := 0
	for k, end := 0, min(c.chunk, len(tokens)); ; k, end = k+1, min(end+c.chunk, len(tokens)) {
		if c.err = c.s.computePrompt(ctx, fmt.Sprintf("prefill-%s-%d", c.id, k), c.req, tokens[:end]); c.err != nil {
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
		select {
		case c.ready <- pin.Blocks[sent:want]:
		case <-ctx.Done():
			c.err = ctx.Err()
			return
		}
		sent = want
		if end == len(tokens) {
			return
		}
	}
}

// ReadBlock copies block i into dst once its chunk is computed.
func (c *chunkedPrefill) ReadBlock(ctx context.Context, i int, dst []byte) error {
	for i >= len(c.have) {
		select {
		case blocks, ok := <-c.ready:
			if !ok {
				if c.err != nil {
					return c.err
				}
				return fmt.Errorf("block %d: the prompt has only %d full blocks", i, len(c.have))
			}
			c.have = append(c.have, blocks...)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.s.eng.ReadBlocks(c.have[i:i+1], dst)
}

// computePrompt runs tokens as a request of one greedy token that is dropped: only the
// prompt's KV matters (no processors, the full KV policy).
func (s *Server) computePrompt(ctx context.Context, id string, kreq kvasir.Request, tokens []int32) error {
	run := kvasir.Request{PromptTokens: tokens, CacheSalt: kreq.CacheSalt, Priority: kreq.Priority, Params: kvasir.SamplingParams{MaxTokens: 1}}
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
