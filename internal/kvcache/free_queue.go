package kvcache

// freeQueue is an intrusive doubly linked list of free blocks with a sentinel node. Every
// operation is O(1). The head is the next block to allocate (least recently used); the tail
// holds the most recently freed cached blocks.
type freeQueue struct {
	root block // sentinel: root.next is the head, root.prev the tail
	n    int
}

// init makes the queue empty.
func (q *freeQueue) init() {
	q.root.next = &q.root
	q.root.prev = &q.root
	q.n = 0
}

// len returns the number of blocks in the queue.
func (q *freeQueue) len() int { return q.n }

// front returns the head block, or nil when the queue is empty.
func (q *freeQueue) front() *block {
	if q.n == 0 {
		return nil
	}
	return q.root.next
}

// insertAfter links b after at.
func (q *freeQueue) insertAfter(b, at *block) {
	b.prev = at
	b.next = at.next
	at.next.prev = b
	at.next = b
	b.inFree = true
	q.n++
}

// pushBack appends b at the tail (evicted last).
func (q *freeQueue) pushBack(b *block) { q.insertAfter(b, q.root.prev) }

// pushFront inserts b at the head (reused first).
func (q *freeQueue) pushFront(b *block) { q.insertAfter(b, &q.root) }

// remove unlinks b, which must be in the queue.
func (q *freeQueue) remove(b *block) {
	b.prev.next = b.next
	b.next.prev = b.prev
	b.prev, b.next = nil, nil
	b.inFree = false
	q.n--
}

// popFront unlinks and returns the head block, or nil when the queue is empty.
func (q *freeQueue) popFront() *block {
	b := q.front()
	if b != nil {
		q.remove(b)
	}
	return b
}
