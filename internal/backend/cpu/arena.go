package cpu

import (
	"bytes"
	"strconv"
	"unsafe"
)

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

// arenaReserve is the memory a WeightArena leaves the system: it takes no new chunk that
// would bring the memory the kernel reports available (Linux's MemAvailable, which counts
// the page cache a model file's mapping sits in) below it.
const arenaReserve = 1 << 30

// Copy returns a copy of src in the arena, starting on a 64-byte boundary, copied in
// parallel on p's threads (p nil: on the caller's), and true; or src itself and false when
// the copy needs a new chunk and the system has too little memory available for it (see
// arenaReserve), so that a model that barely fits in memory stays in its file's mapping.
func (a *WeightArena) Copy(p *Pool, src []byte) ([]byte, bool) {
	if len(src) == 0 {
		return []byte{}, true
	}
	n := (len(src) + 63) &^ 63
	var dst []byte
	if n > arenaChunk {
		if !memoryFor(n) {
			return src, false
		}
		dst = hugeChunk(n)[:len(src):len(src)]
	} else {
		if n > len(a.free) {
			if !memoryFor(arenaChunk) {
				return src, false
			}
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
	return dst, true
}

// memoryFor reports whether the system has n bytes available beyond arenaReserve (true
// where it does not say).
func memoryFor(n int) bool {
	avail, ok := memAvailable()
	return !ok || avail >= int64(n)+arenaReserve
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

// parseMemAvailable returns the MemAvailable line of a /proc/meminfo text in bytes, and
// whether it holds one of the form "MemAvailable: N kB".
func parseMemAvailable(info []byte) (int64, bool) {
	for line := range bytes.Lines(info) {
		rest, ok := bytes.CutPrefix(line, []byte("MemAvailable:"))
		if !ok {
			continue
		}
		kb, ok := bytes.CutSuffix(bytes.TrimSpace(rest), []byte(" kB"))
		if !ok {
			return 0, false
		}
		v, err := strconv.ParseInt(string(bytes.TrimSpace(kb)), 10, 64)
		if err != nil || v < 0 || v > 1<<53 {
			return 0, false
		}
		return v << 10, true
	}
	return 0, false
}
