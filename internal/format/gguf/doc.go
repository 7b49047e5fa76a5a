// Package gguf reads and writes GGUF files, the model format of llama.cpp and ggml.
//
// A GGUF file is a little-endian header followed by a data section:
//
//	magic "GGUF", version (uint32), tensor count (uint64), metadata count (uint64)
//	metadata: key (string), value type (uint32), value
//	tensor infos: name (string), dimension count (uint32), dimensions (uint64 each,
//	    innermost first), element type (uint32, a GGML type id), offset (uint64)
//	padding to the alignment, then the tensor data, each tensor at its offset from the
//	start of the data section
//
// Strings are a uint64 byte count and the bytes; arrays are an element type (uint32), a
// uint64 count and the elements, which may themselves be arrays. Versions 2 and 3 share this
// layout (version 3 only added big-endian files, which this package does not read); version 1
// used 32-bit counts and is rejected.
//
// Open maps a file read-only and parses its header; tensor data is handed out as slices of
// the mapping and is never copied. Parse does the same for bytes already in memory. Every
// count, length and offset read from a file is checked against the bytes that remain before
// anything is allocated, so hostile input fails quickly with an error that names the file and
// the field.
//
// Writer (and WriteFile) produces files that llama.cpp loads: tensors laid out in the order
// they were added, each at an offset that is a multiple of the alignment (general.alignment,
// 32 by default) with zero padding between them.
package gguf
