"""Which image formats may be decoded: those Pillow decodes in-process with its own code. EPS and
friends, which start Ghostscript on untrusted bytes, are left out."""

__all__ = ["SAFE_FORMATS"]

SAFE_FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF", "ICO", "PPM", "TGA", "QOI", "AVIF", "JPEG2000")
