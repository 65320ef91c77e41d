package report

import (
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/kvaudit/kvaudit/internal/safeio"
)

// JUnit XML, as CI systems read it (the Ant/Surefire schema).
type junitSuites struct {
	XMLName xml.Name `xml:"testsuites"`
	Name    string   `xml:"name,attr"`
	junitCounts
	Suites []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name string `xml:"name,attr"`
	junitCounts
	// Properties and SystemOut say what the suite's verdicts were judged
	// by (a comparison's strength, docs/spec.md §14).
	Properties *junitProperties `xml:"properties,omitempty"`
	Cases      []junitCase      `xml:"testcase"`
	SystemOut  string           `xml:"system-out,omitempty"`
}

type junitProperties struct {
	Property []junitProperty `xml:"property"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

// junitCounts are the attributes a suite and the document both carry:
// their cases by outcome and their time.
type junitCounts struct {
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     junitSeconds `xml:"time,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      junitSeconds  `xml:"time,attr"`
	Failure   *junitOutcome `xml:"failure,omitempty"`
	Error     *junitOutcome `xml:"error,omitempty"`
	Skipped   *junitOutcome `xml:"skipped,omitempty"`
}

type junitOutcome struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// junitSeconds is a JUnit time attribute: seconds, to the millisecond.
// Readers (Jenkins, GitLab, GitHub actions) expect it on every suite and
// case; kvaudit writes 0 where it does not time a step on its own.
type junitSeconds float64

func (t junitSeconds) MarshalXMLAttr(name xml.Name) (xml.Attr, error) {
	return xml.Attr{Name: name, Value: strconv.FormatFloat(float64(t), 'f', 3, 64)}, nil
}

func (t *junitSeconds) UnmarshalXMLAttr(a xml.Attr) error {
	f, err := strconv.ParseFloat(a.Value, 64)
	if err != nil {
		return fmt.Errorf("time %q: %w", a.Value, err)
	}
	*t = junitSeconds(f)
	return nil
}

func seconds(d time.Duration) junitSeconds { return junitSeconds(d.Seconds()) }

// add counts a suite's cases and appends it; a suite without a time of
// its own takes the sum of its cases'. The document's time is the sum of
// its suites' unless set before.
func (s *junitSuites) add(suite junitSuite) {
	var sum junitSeconds
	for _, c := range suite.Cases {
		sum += c.Time
		suite.Tests++
		switch {
		case c.Failure != nil:
			suite.Failures++
		case c.Error != nil:
			suite.Errors++
		case c.Skipped != nil:
			suite.Skipped++
		}
	}
	if suite.Time == 0 {
		suite.Time = sum
	}
	s.Tests += suite.Tests
	s.Failures += suite.Failures
	s.Errors += suite.Errors
	s.Skipped += suite.Skipped
	s.Suites = append(s.Suites, suite)
}

func writeJUnit(w io.Writer, out junitSuites) error {
	if out.Time == 0 {
		for _, s := range out.Suites {
			out.Time += s.Time
		}
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// WriteFile writes a report to path the way a CI step can rely on: into a
// temporary file in the same directory, renamed over path only when write
// succeeded, so a failed or interrupted run never leaves a truncated
// report (a stale one from an earlier run is replaced only by a whole
// one). A character device, FIFO or descriptor (/dev/stdout) is written
// to as it is (internal/safeio, the output rule). `kvaudit diff --junit
// FILE` and `kvaudit campaign --junit FILE` write their JUnit this way
// while printing the table.
func WriteFile(path string, write func(io.Writer) error) error {
	return safeio.WriteOutput(path, write)
}
