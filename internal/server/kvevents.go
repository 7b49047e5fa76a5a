package server

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"sync"

	"github.com/kvasir-llm/kvasir"
)

// DefaultKVEventLog is how many prefix-cache events a KVEvents keeps for routers that ask
// for what changed; a router further behind gets a snapshot instead.
const DefaultKVEventLog = 1 << 16

// KVEvents keeps an instance's prefix-cache events for routers (GET /v1/kv_events): the
// recent events, numbered, and the set of block hashes cached now. Make it before the
// engine, hand Record to kvasir.Options.OnKVEvent, then pass it in Config.KVEvents.
type KVEvents struct {
	epoch string // names this log: a restarted instance has a new one

	mu     sync.Mutex
	seq    uint64           // events recorded so far; the last one is number seq
	log    []kvasir.KVEvent // the most recent events, the last being number seq
	keep   int
	cached map[kvasir.BlockHash]struct{}
}

// NewKVEvents makes an empty event log that keeps the last keep events (0:
// DefaultKVEventLog).
func NewKVEvents(keep int) *KVEvents {
	if keep <= 0 {
		keep = DefaultKVEventLog
	}
	var b [8]byte
	rand.Read(b[:])
	return &KVEvents{epoch: hex.EncodeToString(b[:]), keep: keep, cached: make(map[kvasir.BlockHash]struct{})}
}

// Record logs one event; it is kvasir.Options.OnKVEvent.
func (k *KVEvents) Record(e kvasir.KVEvent) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seq++
	if len(k.log) >= 2*k.keep {
		k.log = append(k.log[:0], k.log[len(k.log)-k.keep:]...)
	}
	k.log = append(k.log, e)
	if e.Removed {
		delete(k.cached, e.Hash)
	} else {
		k.cached[e.Hash] = struct{}{}
	}
}

// kvEventsResponse is the body of GET /v1/kv_events: the events after the asked-for one,
// or, when the log no longer holds them (or the epoch differs), a snapshot of every cached
// hash. Either way a router that applies it holds the cached set as of event Seq.
type kvEventsResponse struct {
	Epoch     string         `json:"epoch"`
	Seq       uint64         `json:"seq"`
	BlockSize int            `json:"block_size"`
	Snapshot  bool           `json:"snapshot"`
	Hashes    []string       `json:"hashes,omitempty"`
	Events    []kvEventEntry `json:"events,omitempty"`
}

// kvEventEntry is one event: a hash that was "stored" in or "removed" from the cache.
type kvEventEntry struct {
	Type string `json:"type"`
	Hash string `json:"hash"`
}

// since answers a router whose state is event after of log epoch.
func (k *KVEvents) since(epoch string, after uint64, blockSize int) kvEventsResponse {
	k.mu.Lock()
	defer k.mu.Unlock()
	res := kvEventsResponse{Epoch: k.epoch, Seq: k.seq, BlockSize: blockSize}
	oldest := k.seq - uint64(len(k.log)) // the log holds events oldest+1 .. seq
	if epoch != k.epoch || after < oldest || after > k.seq {
		res.Snapshot = true
		res.Hashes = make([]string, 0, len(k.cached))
		for h := range k.cached {
			res.Hashes = append(res.Hashes, hex.EncodeToString(h[:]))
		}
		return res
	}
	for _, e := range k.log[after-oldest:] {
		t := "stored"
		if e.Removed {
			t = "removed"
		}
		res.Events = append(res.Events, kvEventEntry{Type: t, Hash: hex.EncodeToString(e.Hash[:])})
	}
	return res
}

// handleKVEvents answers GET /v1/kv_events?epoch=E&after=N.
func (s *Server) handleKVEvents(w http.ResponseWriter, r *http.Request) {
	if s.cfg.KVEvents == nil {
		writeError(w, notFound("", "", "this server does not publish its prefix-cache events"))
		return
	}
	q := r.URL.Query()
	var after uint64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, badRequest("after", "after must be an event number, got %.40q", v))
			return
		}
		after = n
	}
	writeJSON(w, http.StatusOK, s.cfg.KVEvents.since(q.Get("epoch"), after, s.eng.BlockSize()))
}

// kvHashesResponse is the body of POST /v1/kv_hashes/...: the block hashes of each prompt
// of the request, as the prefix cache names them.
type kvHashesResponse struct {
	BlockSize int            `json:"block_size"`
	Prompts   []promptHashes `json:"prompts"`
}

// promptHashes are one prompt's tokens and its full blocks' chained hashes.
type promptHashes struct {
	NumTokens int      `json:"num_tokens"`
	TokenIDs  []int32  `json:"token_ids"`
	Hashes    []string `json:"hashes"`
}

// handleKVHashes answers POST /v1/kv_hashes/completions and
// /v1/kv_hashes/chat/completions: the body of a request to the endpoint named, validated
// and tokenized exactly as that endpoint would, answered with its prompts' token ids and
// block hashes instead of being run.
func (s *Server) handleKVHashes(chat bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var reqs []kvasir.Request
		if chat {
			req := chatRequest{commonRequest: commonRequest{limits: &s.cfg.Limits}}
			if !s.readRequest(w, r, &req, func() string { return req.Model }) {
				return
			}
			kreq, _, apiErr := s.chatRequest(r.Context(), &req)
			if apiErr != nil {
				writeError(w, apiErr)
				return
			}
			reqs = []kvasir.Request{kreq}
		} else {
			req := completionRequest{commonRequest: commonRequest{limits: &s.cfg.Limits}}
			if !s.readRequest(w, r, &req, func() string { return req.Model }) {
				return
			}
			var apiErr *APIError
			if reqs, apiErr = s.completionRequests(&req); apiErr != nil {
				writeError(w, apiErr)
				return
			}
		}
		res := kvHashesResponse{BlockSize: s.eng.BlockSize(), Prompts: make([]promptHashes, len(reqs))}
		for i, kr := range reqs {
			hs := s.eng.BlockHashes(kr.PromptTokens, kr.CacheSalt)
			p := promptHashes{NumTokens: len(kr.PromptTokens), TokenIDs: kr.PromptTokens, Hashes: make([]string, len(hs))}
			for j, h := range hs {
				p.Hashes[j] = hex.EncodeToString(h[:])
			}
			res.Prompts[i] = p
		}
		writeJSON(w, http.StatusOK, res)
	}
}
