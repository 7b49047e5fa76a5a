package sample

import "container/heap"

// Temperature divides every logit by T (T > 0).
type Temperature float32

// Process implements Processor.
func (t Temperature) Process(c *Candidates) {
	if t <= 0 {
		return
	}
	inv := 1 / float32(t)
	for i := range c.Logits {
		c.Logits[i] *= inv
	}
}

// TopK keeps the K candidates with the largest logits (the lower id first on ties), sorted.
type TopK int

// Process implements Processor.
func (k TopK) Process(c *Candidates) {
	n := int(k)
	if n <= 0 || n >= c.Len() {
		return
	}
	if !c.Sorted && c.Len() > 4*n {
		// Select the top n with a min-heap in O(len log n), then sort only those.
		h := &minHeap{c: c}
		for i := range c.IDs {
			if h.Len() < n {
				heap.Push(h, i)
			} else if h.less(h.idx[0], i) {
				h.idx[0] = i
				heap.Fix(h, 0)
			}
		}
		ids := make([]int32, n)
		logits := make([]float32, n)
		for j, i := range h.idx {
			ids[j], logits[j] = c.IDs[i], c.Logits[i]
		}
		c.IDs, c.Logits = ids, logits
	}
	c.Sort()
	c.Truncate(n)
}

// minHeap orders candidate indices worst first: smaller logit, or the higher id on ties.
type minHeap struct {
	c   *Candidates
	idx []int
}

// less reports whether candidate a ranks below candidate b.
func (h *minHeap) less(a, b int) bool {
	la, lb := h.c.Logits[a], h.c.Logits[b]
	if la != lb {
		return la < lb
	}
	return h.c.IDs[a] > h.c.IDs[b]
}

func (h *minHeap) Len() int           { return len(h.idx) }
func (h *minHeap) Less(i, j int) bool { return h.less(h.idx[i], h.idx[j]) }
func (h *minHeap) Swap(i, j int)      { h.idx[i], h.idx[j] = h.idx[j], h.idx[i] }
func (h *minHeap) Push(x any)         { h.idx = append(h.idx, x.(int)) }
func (h *minHeap) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}

// TopP keeps the smallest prefix of most likely candidates whose probability sum reaches P
// (nucleus sampling); at least one candidate stays.
type TopP float32

// Process implements Processor.
func (p TopP) Process(c *Candidates) {
	if p <= 0 || p >= 1 || c.Len() == 0 {
		return
	}
	c.Sort()
	var sum float64
	for i, q := range c.Probs() {
		sum += q
		if sum >= float64(p) {
			c.Truncate(i + 1)
			return
		}
	}
}

// MinP drops candidates whose probability is below P times the largest one's; at least one
// candidate stays.
type MinP float32

// Process implements Processor.
func (p MinP) Process(c *Candidates) {
	if p <= 0 || c.Len() == 0 {
		return
	}
	probs := c.Probs()
	top := 0.0
	for _, q := range probs {
		top = max(top, q)
	}
	keep := 0
	for i, q := range probs {
		if q >= float64(p)*top {
			c.IDs[keep], c.Logits[keep] = c.IDs[i], c.Logits[i]
			keep++
		}
	}
	c.Truncate(keep)
}
