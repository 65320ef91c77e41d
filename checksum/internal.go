package checksum

import (
	"fmt"
	"runtime/debug"
)

// InternalError is a bug in kvaudit, never a verdict nor bad input: a
// panic recovered in a goroutine (which would otherwise end the process
// with Go's exit status 2, the one that means "unverified"), or one of
// kvaudit's own consistency checks that failed. The kvaudit command exits
// 4 for it, wherever it is wrapped (errors.As). Its message starts
// "internal error: ".
type InternalError struct {
	// Msg says what went wrong.
	Msg string
	// Stack is where a recovered panic happened; nil for a failed check.
	Stack []byte
	// Panic is the value recovered, nil for a failed check.
	Panic any
}

func (e *InternalError) Error() string {
	if e.Stack == nil {
		return "internal error: " + e.Msg
	}
	return fmt.Sprintf("internal error: %s\n%s", e.Msg, e.Stack)
}

// Unwrap returns the panic's value when it is an error (a runtime error).
func (e *InternalError) Unwrap() error {
	err, _ := e.Panic.(error)
	return err
}

// Internalf is a failed consistency check: an *InternalError with the
// formatted message.
func Internalf(format string, args ...any) error {
	return &InternalError{Msg: fmt.Sprintf(format, args...)}
}

// Recovered turns the value r of a recovered panic into an *InternalError
// with the stack of the goroutine that panicked; call it in the deferred
// function that recovered. what, when not empty, names where it happened
// ("checksum worker") before the panic's value.
func Recovered(what string, r any) error {
	msg := fmt.Sprint(r)
	if what != "" {
		msg = what + ": " + msg
	}
	return &InternalError{Msg: msg, Stack: debug.Stack(), Panic: r}
}
