"""What any check answers (the verdict), a check's result read into one, untrusted text made safe.

Pure: nothing here touches files, subprocesses, the network or the database."""
