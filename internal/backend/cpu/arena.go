package cpu

import "unsafe"

// hugePage is the size of the pages a WeightArena's chunks are aligned to and advised to be
// backed with (the usual transparent huge page of x86-64 and arm64).
const hugePage = 2 << 20

// arenaChunk is the size of the chunks a WeightArena carves copies from; a copy larger than
// a chunk gets a chunk of its own.
const arenaChunk = 64 << 20

// WeightArena holds copies of weight matrices in memory aligned to huge pages and advised to
// be backed by them (madvise MADV_HUGEPAGE on Linux). A decode step streams every weight byte
// once; from a model file's mapping, which the kernel maps in 4 KiB pages, the
// matrix-vector products pay a TLB miss every 4 KiB, and on the machine of
// docs/BENCHMARKS.md's third issue-22 section the page walks cost about a fifth of the
// bandwidth. The chunks are Go memory: they live as long as the slices into them. The zero
// WeightArena is ready to use; it is not safe for concurrent use.
type WeightArena struct {
	free []byte // the current chunk's unused tail
}

// Copy returns a copy of src in the arena, starting on a 64-byte boundary, copied in
// parallel on p's threads (p nil: on the caller's).
func (a *WeightArena) Copy(p *Pool, src []byte) []byte {
	if len(src) == 0 {
		return []byte{}
	}
	n := (len(src) + 63) &^ 63
	var dst []byte
	if n > arenaChunk {
		dst = hugeChunk(n)[:len(src):len(src)]
	} else {
		if n > len(a.free) {
			a.free = hugeChunk(arenaChunk)
		}
		dst = a.free[:len(src):len(src)]
		a.free = a.free[n:]
	}
	// Each huge page is faulted in before its bytes are copied: a write to its first byte
	// gets the kernel to back all of it. Copying from a file's mapping into pages not yet
	// faulted in took several times as long (the two kinds of faults interleaved).
	piece := func(start, end int) {
		for i := start; i < end; i++ {
			d := dst[i*hugePage : min((i+1)*hugePage, len(dst))]
			d[0] = 0
			copy(d, src[i*hugePage:])
		}
	}
	pieces := (len(dst) + hugePage - 1) / hugePage
	if p == nil {
		piece(0, pieces)
	} else {
		p.Run(pieces, piece)
	}
	return dst
}

// hugeChunk allocates at least size bytes starting on a huge page boundary, a whole number
// of huge pages, and advises the kernel to back them with huge pages.
func hugeChunk(size int) []byte {
	size = (size + hugePage - 1) &^ (hugePage - 1)
	b := make([]byte, size+hugePage)
	off := (hugePage - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%hugePage)) % hugePage
	b = b[off : off+size : off+size]
	adviseHugePages(b)
	return b
}
