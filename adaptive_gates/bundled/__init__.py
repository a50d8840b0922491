"""What installs with the package: the gates fitted on the bundled outcomes (``shipped``)
and the real QA data it reads (``datasets``)."""
