package cpu

import "sync"

// attnStates is a Pool's free list of attention work states: Attention's parallel loops
// take one per claimed chunk of units and give it back, so that a warm pool runs attention
// without allocating.
type attnStates struct {
	mu   sync.Mutex
	free []*attnState
}

// get returns a state with room for rows rows of hd values, one block of scores and one
// block of one kv head's dequantized keys and values.
// partial resets what it uses, so a reused state needs no clearing.
func (s *attnStates) get(rows, hd, blockSize int) *attnState {
	var st *attnState
	s.mu.Lock()
	if n := len(s.free); n > 0 {
		st = s.free[n-1]
		s.free[n-1] = nil
		s.free = s.free[:n-1]
	}
	s.mu.Unlock()
	if st == nil {
		st = &attnState{}
	}
	st.m, st.l = grow(st.m, rows), grow(st.l, rows)
	st.acc, st.scores = grow(st.acc, rows*hd), grow(st.scores, blockSize)
	st.fm, st.fl, st.facc = grow(st.fm, rows), grow(st.fl, rows), grow(st.facc, rows*hd)
	st.kq, st.vq = grow(st.kq, blockSize*hd), grow(st.vq, blockSize*hd)
	return st
}

// put gives st back for a later get.
func (s *attnStates) put(st *attnState) {
	s.mu.Lock()
	s.free = append(s.free, st)
	s.mu.Unlock()
}
