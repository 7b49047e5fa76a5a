package cpu

// prefetchNone is the pure-Go twin of the prefetch kernels: a prefetch is only a hint to
// the memory system and changes no result, so the twin does nothing.
func prefetchNone(x []byte, stride, rows, n int) {}
