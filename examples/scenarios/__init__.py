"""The built-in ``mrcnic sim`` scenarios as scenario files (package ``mrcnic.examples.scenarios``)."""
