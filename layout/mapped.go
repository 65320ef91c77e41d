package layout

import "github.com/kvaudit/kvaudit/internal/mapped"

// A FaultError reports that reading mapped memory faulted, which happens
// when a mapped file is truncated (or its storage fails) while it is mapped.
type FaultError = mapped.FaultError

// Guard runs fn on the calling goroutine with debug.SetPanicOnFault(true),
// restoring the previous setting afterwards, and returns fn's error. A fault
// on memory inside fn (a read past the end of a mapped file that was
// truncated while mapped: SIGBUS) becomes a *FaultError naming what, instead
// of crashing the program. Any other panic, including a nil pointer
// dereference, is re-panicked. Only fn's own goroutine is protected:
// goroutines fn starts need their own Guard.
func Guard(what string, fn func() error) error { return mapped.Guard(what, fn) }
