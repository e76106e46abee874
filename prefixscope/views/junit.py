"""The report's gate as JUnit XML: one test case per check, so CI systems show each one.

Built with `xml.etree.ElementTree`, which escapes every attribute and text: a scenario
name or detail from a log cannot break the document.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from prefixscope.findings.model import Report

# Characters XML 1.0 cannot hold at all (escaping does not help): control characters.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value: str) -> str:
    return _NOT_XML.sub("\ufffd", value)


def report_junit(report: Report) -> str:
    checks = report.gate.checks
    failures = sum(1 for c in checks if not c.passed)
    suites = ET.Element("testsuites", name="prefixscope", tests=str(len(checks)),
                        failures=str(failures))
    suite = ET.SubElement(suites, "testsuite", name="prefixscope report gate",
                          tests=str(len(checks)), failures=str(failures), errors="0",
                          skipped="0")
    for check in checks:
        case = ET.SubElement(suite, "testcase", classname="prefixscope.gate",
                             name=_text(check.name))
        if not check.passed:
            failure = ET.SubElement(case, "failure", message=_text(check.detail),
                                    type="GateFailed")
            failure.text = _text(f"{check.name}: value {check.value} threshold "
                                 f"{check.threshold}\n{check.detail}")
        else:
            ET.SubElement(case, "system-out").text = _text(check.detail)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
