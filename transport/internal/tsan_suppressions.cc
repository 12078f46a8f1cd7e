// ThreadSanitizer suppressions for transport tests, compiled into them (TSan reads __tsan_default_suppressions
// at start-up; other builds ignore the symbol).
//
// Debian's Abseil is built without TSan. absl::Status shares its message through a reference-counted rep whose
// increment is inline (instrumented) and whose final decrement and delete happen inside libabsl_status.so
// (not instrumented): TSan then sees the delete but not the atomic that orders it, and reports a race whenever a
// Status made on one thread dies on another. The suppression covers only frees called from that library.
extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:libabsl_status.so\n";
}
