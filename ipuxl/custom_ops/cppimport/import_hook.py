"""``import cppimport.import_hook``: installs ipuxl's finder for C++ custom op modules
(see :mod:`ipuxl.custom_ops.loader`)."""

from ipuxl.custom_ops.loader import install

install()
