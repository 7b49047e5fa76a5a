package server

import (
	"encoding/json"
	"sync"
)

// Responses kept for previous_response_id and GET /v1/responses/{id}: the most recent ones,
// in memory, within a count and a byte budget; the oldest go first. A restart forgets them.
const (
	// ResponseStoreEntries caps how many responses are kept.
	ResponseStoreEntries = 1024
	// ResponseStoreBytes caps the bytes (as JSON) of the responses and conversations kept.
	ResponseStoreBytes = 64 << 20
)

// responseStore is the bounded store of finished responses.
type responseStore struct {
	capacity, maxBytes int

	mu    sync.Mutex
	byID  map[string]*storedResponse
	order []string // ids, oldest first
	bytes int
}

// storedResponse is a finished response and the conversation up to and including it (its
// input, what it continued, and its output; not its instructions).
type storedResponse struct {
	response     *responseObject
	conversation []chatMessage
	size         int
}

func newResponseStore(capacity, maxBytes int) *responseStore {
	return &responseStore{capacity: capacity, maxBytes: maxBytes, byID: map[string]*storedResponse{}}
}

// put keeps a finished response whose request held the conversation history, evicting
// the oldest beyond the budgets. A response larger than the whole byte budget is not kept.
func (st *responseStore) put(resp *responseObject, history []chatMessage) {
	conv := append(append([]chatMessage(nil), history...), conversationOf(resp)...)
	r, _ := json.Marshal(resp)
	c, _ := json.Marshal(conv)
	e := &storedResponse{response: resp, conversation: conv, size: len(r) + len(c)}
	if e.size > st.maxBytes {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.byID[resp.ID] = e
	st.order = append(st.order, resp.ID)
	st.bytes += e.size
	for len(st.order) > st.capacity || st.bytes > st.maxBytes {
		old := st.order[0]
		st.order = st.order[1:]
		st.bytes -= st.byID[old].size
		delete(st.byID, old)
	}
}

// get returns the stored response of id, or nil.
func (st *responseStore) get(id string) *storedResponse {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.byID[id]
}
