"""Reusable widgets the screens compose: the virtualised sample table and step rows, a field's view
(token strip, pictures, video player, step table), the key footer. A widget may import the adapter's
types and the app's messages, never a screen."""
