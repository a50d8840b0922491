"""Saving, in one place: the checked format of a saved directory (``saved_format``:
JSON and arrays, checksums, safe names), a directory replaced whole under a lock
(``directory_swap``), outputs tried for real before the work (``writable``), and
the JSON read from files (``strict_json``) or written one value a line (``json_lines``)."""
