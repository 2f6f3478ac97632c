# Renders the Open OnDemand app in slurm/ood/ the way the dashboard does, without an OnDemand
# install: plain ERB with stand-ins for the `session` and `context` objects the templates use.
#
#   ruby ood_render.rb APP_DIR OUT_DIR VALUES_JSON
#
# VALUES_JSON holds the form's values ({"num_cores": "2", ...}) and, for view.html.erb, the
# connection values (host, port, password). OUT_DIR receives submit.yml, view.html and the staged
# template/ folder with every *.erb rendered and the .erb dropped from its name (modes kept).
require "erb"
require "fileutils"
require "json"
require "ostruct"
require "pathname"

# What OnDemand exposes to ERB: the form values as methods, `context`, and `session`.
class RenderScope
  def initialize(values, staged_root)
    @context = OpenStruct.new(values)
    @session = OpenStruct.new(id: "test-session", staged_root: Pathname.new(staged_root))
    values.each { |name, value| define_singleton_method(name) { value } }
  end

  attr_reader :context, :session

  def render(path)
    ERB.new(File.read(path), trim_mode: "-").tap { |erb| erb.filename = path.to_s }.result(binding)
  end
end

abort "usage: ruby #{$PROGRAM_NAME} APP_DIR OUT_DIR VALUES_JSON" unless ARGV.length == 3
app_dir, out_dir, values_path = ARGV.map { |arg| Pathname.new(arg) }
values = JSON.parse(File.read(values_path))
staged = out_dir + "template"
scope = RenderScope.new(values, staged)

FileUtils.mkdir_p(staged)
File.write(out_dir + "submit.yml", scope.render(app_dir + "submit.yml.erb"))
File.write(out_dir + "view.html", scope.render(app_dir + "view.html.erb"))
Dir.children(app_dir + "template").sort.each do |name|
  source = app_dir + "template" + name
  target = staged + name.delete_suffix(".erb")
  if name.end_with?(".erb")
    File.write(target, scope.render(source))
  else
    FileUtils.cp(source, target)
  end
  File.chmod(File.stat(source).mode & 0o777, target)
end
