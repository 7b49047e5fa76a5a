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

// prefill computes kreq's prompt and transfers its cached blocks.
func (s *Server) prefill(ctx context.Context, id, target string, kreq kvasir.Request) (kvPrefillResponse, error) {
	start := time.Now()
	// Only the prompt's KV matters: one greedy token, no processors, the full KV policy.
	run := kvasir.Request{ID: "prefill-" + id, PromptTokens: kreq.PromptTokens, CacheSalt: kreq.CacheSalt, Priority: kreq.Priority,
		Params: kvasir.SamplingParams{MaxTokens: 1}}
	ch, apiErr := s.submit(ctx, run.ID, []kvasir.Request{run}, "prompt")
	if apiErr != nil {
		return kvPrefillResponse{}, apiErr
	}
	for it := range ch {
		if it.Out.Err != nil {
			return kvPrefillResponse{}, fmt.Errorf("prefill: %w", it.Out.Err)
		}
	}
	if err := ctx.Err(); err != nil {
		return kvPrefillResponse{}, err
	}
	res := kvPrefillResponse{TransferID: id, PromptTokens: len(kreq.PromptTokens), PrefillMS: ms(time.Since(start))}
	pin, err := s.eng.PinPrefix(kreq.PromptTokens, kreq.CacheSalt)
	if err != nil {
		return res, err
	}
	defer s.eng.Unpin(pin)
	if len(pin.Blocks) == 0 {
		return res, errors.New("no full block of the prompt is cached (a prompt shorter than a block, or the pool reused its blocks)")
	}
	t := time.Now()
	bb := s.eng.BlockBytes()
	h := kvtransfer.Header{ID: id, Model: s.eng.ModelName(), BlockSize: s.eng.BlockSize(), BlockBytes: bb, NumBlocks: len(pin.Blocks)}
	sender := s.cfg.KVSender
	if sender == nil {
		sender = &kvtransfer.Sender{}
	}
	err = sender.Send(ctx, target, h, pin.Hashes, pinSource{eng: s.eng, blocks: pin.Blocks})
	s.metrics.observeTransfer("sent", err, int64(len(pin.Blocks))*int64(bb))
	if err != nil {
		return res, err
	}
	res.NumBlocks, res.Bytes, res.TransferMS = len(pin.Blocks), int64(len(pin.Blocks))*int64(bb), ms(time.Since(t))
	return res, nil
}

// pinSource reads a pin's blocks one at a time for the sender.
type pinSource struct {
	eng    *kvasir.Engine
	blocks []int32
}

func (p pinSource) ReadBlock(i int, dst []byte) error {
	return p.eng.ReadBlocks(p.blocks[i:i+1], dst)
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
