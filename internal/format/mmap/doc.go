// Package mmap maps model files read-only into memory, so that tensor data is used in
// place and paged in by the operating system rather than copied on load.
package mmap
