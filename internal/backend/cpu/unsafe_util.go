package cpu

import "unsafe"

// bytesAsF32 views little-endian float32 bytes as []float32 without copying (amd64 and arm64
// are little-endian; a trailing partial element is dropped).
func bytesAsF32(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// f32Bytes views a []float32 as its bytes without copying.
func f32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}
