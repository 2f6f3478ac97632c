"""nbgrader in a user's own server on the course hub: which courses they take or teach comes from their
hub groups (nbgrader's JupyterHubAuthPlugin: nbgrader-<course> students, formgrade-<course> instructors).

formgrader's server leaves this out: it grades one course, the hub's, and is no hub user with groups.
"""

from nbgrader.auth import JupyterHubAuthPlugin

c = get_config()  # noqa: F821  (injected by traitlets when nbgrader loads this file)

c.Authenticator.plugin_class = JupyterHubAuthPlugin
